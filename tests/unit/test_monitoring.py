"""The monitoring stage's files: Prometheus' own checks (promtool, Debian's ``prometheus``
package), one ``promtool test rules`` case per alert, status.py's figures recomputed by the
recording rules from the same recorded /metrics, and every dashboard query against the names
the rules record and the engines export."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploys import settings
from deploys.monitoring import (
    counters,
    dashboard,
    figures,
    files,
    promql,
    rules,
    savings,
    status_metrics,
    targets,
)
from deploys.settings import group_data

FACTS = Path(__file__).resolve().parents[1] / "facts" / "status.EngineAnswers"
PROMTOOL = shutil.which("promtool")
LAB = {
    "ceph1": ("ceph_admin", "rgw", "lab"),
    "gpu1": ("gpu", "lab"),
    "gpu2": ("gpu", "lab"),
    "gaudi1": ("gaudi", "lab"),
}
IPS = {
    "ceph1": "10.213.7.11",
    "gpu1": "10.213.7.21",
    "gpu2": "10.213.7.22",
    "gaudi1": "10.213.7.31",
}
KEY = "lab-sentinel-api-key-0123456789"
# The default lab, Pacific, whatever lab this machine runs (group_data/lab.py reads both).
LAB_ENV = {"KVCEPH_LAB_INSTANCE": "0", "KVCEPH_LAB_CEPH": "pacific"}


def lab_hosts() -> dict:
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)  # the lab's CA exists once the lab is up
    # Not the lab's measured figures: make test runs this beside the labs whose verify.py writes
    # them (their prefill curve gave the PromQL and Python sides of one figure a 1-ulp gap).
    data["kvceph_measured_dir"] = "/nonexistent/kvceph-unit-tests/measured"
    return {n: settings.load(data, n, g) for n, g in LAB.items()}


def write(tmp: Path, texts: dict[str, str]) -> None:
    for rel, text in texts.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)


def promtool(*args, cwd=None) -> str:
    assert PROMTOOL, (
        "promtool missing: make deps (apt-get install --no-install-recommends prometheus)"
    )
    p = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    o = targets.ScrapeOptions(directory=str(tmp), api_key=True, interval="15s")
    texts = files.rendered(lab_hosts(), IPS, o)
    write(tmp, texts)
    (tmp / targets.API_KEY_FILE).write_text(KEY + "\n")
    return tmp, texts, o


def test_targets_one_per_engine_with_labels_and_no_key_in_any_text(rendered):
    tmp, texts, _ = rendered
    groups = json.loads(texts[targets.ENGINES_FILE])
    assert [g["targets"] for g in groups] == [
        ["10.213.7.31:8000"],
        ["10.213.7.21:8000"],
        ["10.213.7.22:8000"],
    ]
    assert {g["labels"]["host"] for g in groups} == {"gpu1", "gpu2", "gaudi1"}
    assert json.loads(texts[targets.CEPH_FILE]) == [{"targets": ["10.213.7.11:9283"], "labels": {}}]
    jobs = yaml.safe_load(texts[files.SCRAPE_FILE])["scrape_configs"]
    assert jobs[0]["authorization"] == {
        "type": "Bearer",
        "credentials_file": f"{tmp}/{targets.API_KEY_FILE}",
    }
    assert not any(KEY in t for t in texts.values())


def test_no_api_key_no_authorization():
    o = targets.ScrapeOptions(directory="/etc/prometheus/kvceph", api_key=False)
    assert "authorization" not in targets.scrape_configs(o)[0]


def test_promtool_check_config_and_rules(rendered):
    tmp, _, o = rendered
    config = tmp / "prometheus.yml"
    config.write_text(yaml.safe_dump(targets.prometheus_config(o)))
    out = promtool("check", "config", str(config))
    assert "4 rule files found" in out
    promtool("check", "rules", *(str(tmp / r) for r in files.RULES))


# One promtool case per alert. Group "m tp1": prefill 1e-4 s/token flat, 100 bytes per token.
GROUP = rules.GroupFigures("m tp1", 1e-4, 0.0, 100)
RGW = ("standard", 2)  # cephadm's rgw.standard, two daemons
ENGINE = {"job": rules.ENGINES_JOB, "cache_group": "m tp1"}


def _engine(host: str) -> dict:
    return {**ENGINE, "instance": f"{host}:8000", "host": host, "engine": "vllm"}


def _series(name: str, labels: dict, values: str) -> dict:
    inner = name.split("{", 1)
    extra = inner[1].rstrip("}") + "," if len(inner) > 1 else ""
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{inner[0]}{{{extra}{text}}}", "values": values}


def _expected(alert: str, labels: dict) -> dict:
    rule = next(r for r in rules.alert_rules(RGW)["rules"] if r["alert"] == alert)

    def expand(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)

    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: expand(v) for k, v in rule["annotations"].items()},
    }


def _case(alert, series, fires_at, labels, quiet_at=None, resolved_at=None, interval="1m"):
    checks = [{"eval_time": fires_at, "alertname": alert, "exp_alerts": [_expected(alert, labels)]}]
    for t in (quiet_at, resolved_at):
        if t is not None:
            checks.append({"eval_time": t, "alertname": alert, "exp_alerts": []})
    return {"name": alert, "interval": interval, "input_series": series, "alert_rule_test": checks}


CEPH = {"job": rules.CEPH_JOB}
HEALTH = rules.CEPH_HEALTH


def alert_cases() -> list[dict]:
    g1, g2 = _engine("gpu1"), _engine("gpu2")
    engine_labels = {k: g1[k] for k in ("instance", "host", "engine", "cache_group")}
    return [
        # gpu1 down 8 minutes (past the 5m for:); gpu2 down 4 (an engine's load, 252 s)
        _case(
            "KvcephEngineDown",
            [
                _series("up", g1, "1 1 0 0 0 0 0 0 0 0 1 1 1"),
                _series("up", g2, "1 1 0 0 0 0 1 1 1 1 1 1 1"),
            ],
            "8m",
            g1,
            quiet_at="6m",
            resolved_at="12m",
        ),
        _case(
            "KvcephEngineRestarting",
            [
                _series(promql.STARTED, g1, "100 200 300 400 500 600 700 700"),
                _series(promql.STARTED, g2, "7 8 9 10 11 12 12 12"),
            ],
            "7m",
            engine_labels,
            quiet_at="5m",
        ),
        # S3 down, DRAM on: gpu1 stores and hits (from DRAM) but no PUT succeeds; gpu2 writes
        _case(
            "KvcephS3Down",
            [
                _series(promql.LMCACHE_STORED, {**g1, "worker_id": "0"}, "0+256x40"),
                _series(promql.LMCACHE_REMOTE_WRITES, {**g1, "worker_id": "0"}, "0x40"),
                _series(promql.LMCACHE_HIT_TOKENS, {**g1, "worker_id": "0"}, "0+1000x40"),
                _series(promql.HITS, g1, "0+1000x40"),
                _series(promql.QUERIES, g1, "0+1200x40"),
                _series(promql.LMCACHE_STORED, {**g2, "worker_id": "0"}, "0+256x40"),
                _series(promql.LMCACHE_REMOTE_WRITES, {**g2, "worker_id": "0"}, "0+1x40"),
            ],
            "25m",
            engine_labels,
            quiet_at="5m",
        ),
        _case(
            "KvcephRemoteTierFailing",
            [
                _series(promql.HITS, g1, "0+1000x40"),
                _series(promql.LOADED, g1, "0+100x40"),
                _series(promql.HITS, g2, "0+1000x40"),
                _series(promql.LOADED, g2, "0+1000x40"),
            ],
            "30m",
            engine_labels,
            quiet_at="5m",
        ),
        _case(
            "KvcephRemoteTierOff",
            [
                _series(promql.QUERIES, g1, "0+1000x60"),
                _series(promql.HITS, g1, "0+0x60"),
                _series(promql.QUERIES, g2, "0+1000x60"),
                _series(promql.HITS, g2, "0+800x60"),
            ],
            "40m",
            engine_labels,
            quiet_at="10m",
        ),
        _case(
            "KvcephHitRatioCollapsed",
            [
                _series(promql.QUERIES, g1, "0+5000x100"),
                _series(promql.HITS, g1, "0+4000x84 336500+500x15"),
            ],
            "480m",
            {"cache_group": "m tp1", "tier": "lmcache"},
            quiet_at="420m",
            interval="5m",
        ),
        _case(
            "KvcephTierNotPaying",
            [
                _series(promql.COMPUTED, g1, "0+100x120"),
                _series(promql.LOADED, g1, "0+900x120"),
                _series(promql.PROMPT_TOKENS, g1, "0+1000x120"),
                _series(promql.REQUESTS + '{finished_reason="length"}', g1, "0+1x120"),
                _series(promql.TTFT + "_sum", g1, "0+0.2x120"),
            ],
            "100m",
            {"cache_group": "m tp1"},
            quiet_at="20m",
        ),
        # A mgr failover: ceph1 was active, both mgrs still answer /metrics, ceph2 (the new
        # active) is not a target: no Ceph figures at all, and no RGW alert from their absence
        _case(
            "KvcephCephMetricsMissing",
            [
                _series("up", {**CEPH, "instance": "ceph1:9283"}, "1x25"),
                _series(HEALTH, {**CEPH, "instance": "ceph1:9283"}, "0x4 _x20"),
            ],
            "16m",
            CEPH,
            quiet_at="8m",
        ),
        _case(
            "KvcephHaproxyBackendDown",
            [
                _series("up", HAPROXY, "1x6"),
                _series(
                    "haproxy_backend_active_servers", {**HAPROXY, "proxy": "rgw"}, "2 1 0 0 0 0 0"
                ),
                _series("haproxy_backend_active_servers", {**HAPROXY, "proxy": "stats"}, "1x6"),
            ],
            "5m",
            {**HAPROXY, "proxy": "rgw"},
            quiet_at="3m",
        ),
        _case(
            "KvcephCephExporterDown",
            [_series("up", {"job": rules.CEPH_JOB, "instance": "ceph1:9283"}, "0x10")],
            "6m",
            {"job": rules.CEPH_JOB, "instance": "ceph1:9283"},
            quiet_at="4m",
        ),
        _case(
            "KvcephBucketQuotaHigh",
            [
                _series(status_metrics.USED, {"bucket": "lmcache"}, "10 50 85 85"),
                _series(status_metrics.QUOTA, {"bucket": "lmcache"}, "100x3"),
            ],
            "2m",
            {"bucket": "lmcache"},
            quiet_at="1m",
        ),
        _case(
            "KvcephBucketQuotaFull",
            [
                _series(status_metrics.USED, {"bucket": "lmcache"}, "85 96 96"),
                _series(status_metrics.QUOTA, {"bucket": "lmcache"}, "100x2"),
            ],
            "1m",
            {"bucket": "lmcache"},
            quiet_at="0m",
        ),
        _case(
            "KvcephStatusStale",
            [_series(status_metrics.READ_AT, {"bucket": "lmcache"}, "0x60")],
            "200m",
            {"bucket": "lmcache"},
            quiet_at="185m",
            interval="5m",
        ),
        _case(
            "KvcephRgwDaemonDown",
            [
                _series(HEALTH, CEPH, "0x15"),
                _series("ceph_rgw_metadata", {"ceph_daemon": "rgw.standard.ceph1.aa"}, "1x15"),
                _series("ceph_rgw_metadata", {"ceph_daemon": "rgw.standard.ceph2.bb"}, "1 1 1"),
                _series("ceph_rgw_metadata", {"ceph_daemon": "rgw.other.ceph2.cc"}, "1x15"),
            ],
            "12m",
            {},
            quiet_at="3m",
        ),
    ]


ROUTER = {"instance": "r1:9100", "host": "r1", "route": "8100"}
HAPROXY = {"job": rules.HAPROXY_JOB, "instance": "ceph1:8405"}


def _quiet(name: str, series: list[dict], alerts: dict[str, list[str]], interval="1m") -> dict:
    """A case where the named alerts stay silent at each of their eval times."""
    checks = [
        {"eval_time": t, "alertname": a, "exp_alerts": []}
        for a, times in alerts.items()
        for t in times
    ]
    return {"name": name, "interval": interval, "input_series": series, "alert_rule_test": checks}


def extra_cases() -> list[dict]:
    """What each alert must also do: fire on absence, stay quiet on a drained deploy."""
    g1, g2 = _engine("gpu1"), _engine("gpu2")
    started = lambda g, at: _series(promql.STARTED, g, at)  # noqa: E731
    minutes = [f"{m}m" for m in range(0, 40, 2)]
    # A deploy's roll: gpu1 drained and down 4.2 min (252 s, the longest measured load), then
    # gpu2; verify.py restarts each twice more (warm, fallback): 3 starts each, no page.
    return [
        _quiet(
            "a drained deploy does not page",
            [
                _series("up", g1, "1 1 0 0 0 0 1x6 0 0 0 0 1x6 0 0 0 0 1x10"),
                _series("up", g2, "1x8 0 0 0 0 1x6 0 0 0 0 1x6 0 0 0 0 1x4"),
                started(g1, "100x5 400x10 900x10 1500x10"),
                started(g2, "200x12 700x10 1200x10 1800x3"),
            ],
            {"KvcephEngineDown": minutes, "KvcephEngineRestarting": minutes},
        ),
        # A crash loop that dies before any scrape sees its start time: up flips
        _case(
            "KvcephEngineRestarting",
            [_series("up", g1, "1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0"), _series("up", g2, "1x15")],
            "13m",
            {k: g1[k] for k in ("instance", "host", "engine", "cache_group")},
            quiet_at="10m",
        )
        | {"name": "a crash loop with no start time pages"},
        _case(
            "KvcephRgwDaemonDown",
            [
                _series(HEALTH, CEPH, "0x15"),
                _series("ceph_rgw_metadata", {"ceph_daemon": "rgw.standard.ceph1.aa"}, "1 1 1"),
                _series("ceph_rgw_metadata", {"ceph_daemon": "rgw.standard.ceph2.bb"}, "1 1 1"),
            ],
            "12m",
            {},
            quiet_at="3m",
        )
        | {"name": "every RGW daemon gone"},
        _quiet(
            "no Ceph figures: no RGW alert from their absence",
            [
                _series("up", {**CEPH, "instance": "ceph1:9283"}, "1x25"),
                _series(HEALTH, {**CEPH, "instance": "ceph1:9283"}, "0x4 _x20"),
            ],
            {"KvcephRgwDaemonDown": ["16m", "24m"]},
        ),
        _case(
            "KvcephStatusStale",
            [_series("up", {"job": "node"}, "1x20")],
            "15m",
            {},
            quiet_at="5m",
        )
        | {"name": "status timer never installed"},
    ]


def paying_case() -> dict:
    """The same traffic with TTFT well under cold: no KvcephTierNotPaying (no noise)."""
    case = next(c for c in alert_cases() if c["name"] == "KvcephTierNotPaying")
    series = [dict(s) for s in case["input_series"]]
    series[-1]["values"] = "0+0.05x120"
    return {
        "name": "paying",
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "100m", "alertname": "KvcephTierNotPaying", "exp_alerts": []}
        ],
    }


def test_promtool_one_case_per_alert(tmp_path):
    write(
        tmp_path,
        {
            "figures.yml": yaml.safe_dump({"groups": [rules.recording_rules([GROUP])]}),
            "alerts.yml": yaml.safe_dump({"groups": [rules.alert_rules(RGW)]}),
        },
    )
    cases = alert_cases()
    assert sorted(c["name"] for c in cases) == sorted(
        r["alert"] for r in rules.alert_rules(RGW)["rules"]
    )
    cases += extra_cases()
    # Hours of history are evaluated every 5 min, the rest every minute (promtool evaluates every
    # rule at every step up to the case's last eval_time).
    slow = [c for c in cases if c["interval"] == "5m"]
    for name, interval, group in (
        ("test.yml", "1m", [c for c in cases if c not in slow] + [paying_case()]),
        ("test-hours.yml", "5m", slow),
    ):
        test = {"rule_files": ["figures.yml", "alerts.yml"], "evaluation_interval": interval}
        (tmp_path / name).write_text(yaml.safe_dump({**test, "tests": group}))
    promtool("test", "rules", "test.yml", "test-hours.yml", cwd=tmp_path)


def _metrics_text(fixture: str) -> str:
    return json.loads(json.loads((FACTS / fixture).read_text())["output"][0])["metrics"]


def test_rules_compute_status_figures_from_the_same_metrics(tmp_path):
    """The lab engine's recorded /metrics as one minute's increase, held for an hour: the
    recorded hit ratio is status.py's, the saved seconds per hour are 60 x status.py's."""
    hosts = lab_hosts()
    me = hosts["gpu1"]
    c = counters.from_text(_metrics_text("lab-engine-after-cross-node.json"))
    figure = savings.prefill_seconds_per_token(me, c.mean_prompt_tokens)
    saved = savings.saved_seconds(c.reused_tokens, figure)
    assert c.hit_ratio and saved  # the fixture hit: the comparison means something
    labels = {**_engine("gpu1"), "cache_group": targets.cache_group(me)}
    per_minute = {
        promql.HITS: c.external_hits,
        promql.QUERIES: c.external_queries,
        promql.LOADED: c.loaded_tokens,
        promql.COMPUTED: c.computed_tokens,
        promql.PROMPT_TOKENS: c.prompt_tokens,
        promql.REQUESTS: c.requests,
    }
    series = [_series(name, labels, f"0+{v!r}x60") for name, v in per_minute.items()]
    cg = f'cache_group="{labels["cache_group"]}"'
    write(
        tmp_path,
        {
            "figures.yml": files.rendered(hosts, IPS, targets.ScrapeOptions("/x", False))[
                "rules/kvceph-figures.yml"
            ]
        },
    )
    test = {
        "rule_files": ["figures.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'kvceph:hit_ratio:rate15m{tier="lmcache"}',
                        "eval_time": "60m",
                        "exp_samples": [
                            {
                                "labels": f'kvceph:hit_ratio:rate15m{{{cg},tier="lmcache"}}',
                                "value": c.hit_ratio,
                            }
                        ],
                    },
                    {
                        "expr": "kvceph:gpu_prefill_seconds_saved:per_hour",
                        "eval_time": "60m",
                        "exp_samples": [
                            {
                                "labels": f"kvceph:gpu_prefill_seconds_saved:per_hour{{{cg}}}",
                                "value": 60 * saved,
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert figures.hit_ratio(c.external_hits, c.external_queries) == c.hit_ratio


# Dashboard: every name a panel's query reads is recorded by the rules or exported by the engines
# (the lab engine and a recorded real vLLM 0.26) or Ceph's mgr module.
_FUNCS = {
    "sum", "by", "on", "rate", "histogram_quantile", "group_left", "le", "and", "or", "offset",
    "avg_over_time", "vector", "count", "changes", "up", "time", "absent", "absent_over_time",
    "unless", "max", "clamp_min",
}  # fmt: skip
CEPH_MGR_MODULE = Path("/usr/share/ceph/mgr/prometheus/module.py")
CEPH_NAMES = {
    "ceph_pool_stored", "ceph_pool_max_avail", "ceph_pool_metadata", "ceph_rgw_metadata",
    "ceph_health_status",
}  # fmt: skip
# haproxy's built-in exporter (USE_PROMEX, addons/promex: "backend_active_servers"); not
# installed here, so not checked against its source.
HAPROXY_NAMES = {"haproxy_backend_active_servers"}


def _names(expr: str) -> set[str]:
    expr = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^\]]*\]|offset \w+', " ", expr)
    expr = re.sub(r"\b(by|on|group_left|ignoring|without)\s*\([^)]*\)", " ", expr)
    words = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr)
    return {w for w in words if w not in _FUNCS and not re.fullmatch(r"[0-9.e]+", w)}


def _exposed(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] not in "#"}


def exported_names() -> set[str]:
    from kvceph_lab_engine.metrics import Metrics

    lmcache = Metrics("m", lmcache={"model_name": "m", "served_model_name": "m"}).render()
    names = _exposed(lmcache + _metrics_text("vllm-0.26-h200-warm-sync.json"))
    return names | {n.removesuffix("_bucket") for n in names if n.endswith("_bucket")}


def test_every_dashboard_and_rule_query_reads_known_names():
    recorded = {r["record"] for r in rules.recording_rules([GROUP])["rules"]}
    known = (
        recorded
        | exported_names()
        | _exposed(status_metrics.exposition(STATUS_DOC))
        | CEPH_NAMES
        | HAPROXY_NAMES
        | _exposed((FACTS.parents[1] / "fixtures/mp_server/metrics-h100-served.txt").read_text())
    )
    board = dashboard.dashboard("default.rgw.buckets.data")
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    queries += [r["expr"] for r in rules.recording_rules([GROUP])["rules"]]
    queries += [r["expr"] for r in rules.alert_rules(RGW)["rules"]]
    assert len(board["panels"]) == 10 and len({p["id"] for p in board["panels"]}) == 10
    unknown = {n for q in queries for n in _names(q)} - known
    assert not unknown, unknown
    assert "vllm:time_to_first_token_seconds_bucket" in exported_names()


LMCACHE_OBSERVABILITY = next(
    Path(__file__)
    .resolve()
    .parents[2]
    .glob(".venv/lmcache/lib/python3*/site-packages/lmcache/observability.py"),
    None,
)


@pytest.mark.skipif(LMCACHE_OBSERVABILITY is None, reason="make lmcache-venv not run")
def test_lmcache_names_are_lmcache_0_5_6s_counters():
    """The lab engine mimics them; LMCache itself creates each as a counter."""
    source = LMCACHE_OBSERVABILITY.read_text()
    read = {n for n in exported_names() if n.startswith("lmcache:")}
    assert {promql.LMCACHE_STORED, promql.LMCACHE_REMOTE_WRITES, promql.REMOTE_WRITE_BYTES} <= read
    for name in read:
        i = source.index(f'name="{name.removesuffix("_total")}"')
        assert "_create_counter(" in source[i - 120 : i], name


@pytest.mark.skipif(not CEPH_MGR_MODULE.exists(), reason="ceph-mgr-modules-core not installed")
def test_ceph_names_are_the_mgr_modules():
    source = CEPH_MGR_MODULE.read_text()
    for metric in ("pool_metadata", "rgw_metadata", "health_status"):
        assert f"'{metric}'" in source
    for stat in ("stored", "max_avail"):
        assert f"'{stat}'" in source


STATUS_DOC = {
    "time": "2026-12-03T18:00:00+00:00",
    "cluster": {"bucket": "lmcache", "bytes": 850, "quota_bytes": 1000, "objects": 3},
}


def test_status_metrics_carry_what_status_read_and_nothing_else():
    doc = STATUS_DOC
    text = status_metrics.exposition(doc)
    assert f'{status_metrics.USED}{{bucket="lmcache"}} 850.0' in text
    assert f'{status_metrics.QUOTA}{{bucket="lmcache"}} 1000.0' in text
    assert f'{status_metrics.READ_AT}{{bucket="lmcache"}} 1796320800.0' in text
    no_quota = status_metrics.exposition(
        {**doc, "cluster": {**doc["cluster"], "quota_bytes": None}}
    )
    assert status_metrics.QUOTA not in no_quota and status_metrics.USED in no_quota
    assert status_metrics.exposition({"time": doc["time"], "cluster": {"bucket": "b"}}) == ""


def test_status_metrics_export_each_engines_refused_crc32c_count():
    refused = {"refused": 3, "checked": 9, "at": "2026-12-07T05:21:40.512000+0000"}
    engines = [
        {"host": "gpu1", "unit": "vllm.service", "reachable": True, "crc32c_refused": refused},
        {"host": "gpu2", "unit": "vllm.service", "reachable": True, "crc32c_refused": None},
        {"host": "gpu3", "unit": "vllm.service", "reachable": False},
    ]
    text = status_metrics.exposition({**STATUS_DOC, "engines": engines})
    name = status_metrics.CRC32C_REFUSED
    assert [x for x in text.splitlines() if x.startswith(name)] == [
        f'{name}{{host="gpu1",unit="vllm.service"}} 3.0'
    ]
    assert f"# TYPE {name} gauge" in text
    assert name not in status_metrics.exposition(STATUS_DOC)


def test_monitoring_settings_defaults_and_one_line_errors():
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)
    m = settings.load(data, "prom1", ("monitoring", "lab")).monitoring
    assert (m.prometheus_dir, m.prometheus_service, m.ceph_exporters) == (
        "/etc/prometheus/kvceph",
        "prometheus",
        (),
    )
    assert settings.load(data, "gpu1", ("gpu", "lab")).monitoring is None
    for key, value in (
        ("kvceph_ceph_mgr_exporters", ["ceph1"]),
        ("kvceph_prometheus_scrape_interval", "15 s"),
        ("kvceph_prometheus_dir", "etc/prometheus"),
    ):
        with pytest.raises(settings.reader.SettingsError) as e:
            settings.load({**data, key: value}, "prom1", ("monitoring", "lab"))
        assert str(e.value).startswith(f"prom1: {key} = ") and "\n" not in str(e.value)
    none = settings.load({**data, "kvceph_grafana_dashboards_dir": None}, "p", ("monitoring",))
    assert none.monitoring.grafana_dir is None


def test_router_targets_one_per_route_on_its_metrics_port_and_every_job_scraped():
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)
    me = settings.load({**data, "kvceph_router_port": 8100}, "ceph1", ("router", "lab"))
    many = settings.load(
        {**data, "kvceph_router_ports": {"a": 8200, "b": 8100}}, "r2", ("router", "lab")
    )
    bound = settings.load({**data, "kvceph_router_bind": "10.9.0.3"}, "r3", ("router", "lab"))
    assert targets.router_targets([(bound, "10.0.0.3")])[0]["targets"] == ["10.9.0.3:9100"]
    assert targets.router_targets([(many, "10.0.0.2"), (me, "10.0.0.1")]) == [
        {"targets": ["10.0.0.1:9100"], "labels": {"host": "ceph1", "route": "8100"}},
        {"targets": ["10.0.0.2:9100"], "labels": {"host": "r2", "route": "8100"}},
        {"targets": ["10.0.0.2:9200"], "labels": {"host": "r2", "route": "8200"}},
    ]
    # the router serves its metrics where it listens for clients (not loopback only)
    from deploys.router import routes

    config = routes.config(routes.Route("m", 8100, ()), me.router)
    assert (config["prometheus_host"], config["prometheus_port"]) == (me.router.bind, 9100)
    o = targets.ScrapeOptions(directory="/p", api_key=False, interval="15s")
    jobs = {j["job_name"]: j for j in targets.scrape_configs(o)}
    assert set(jobs) == {
        rules.ENGINES_JOB, rules.MP_JOB, rules.CEPH_JOB, rules.ROUTER_JOB, rules.HAPROXY_JOB
    }  # fmt: skip
    assert jobs[rules.ROUTER_JOB]["file_sd_configs"] == [{"files": ["/p/router.json"]}]
    assert targets.haproxy_targets(["ceph1:8405"]) == [{"targets": ["ceph1:8405"], "labels": {}}]
    assert targets.haproxy_targets([]) == []


def test_kv_bytes_per_token_is_the_whole_models_every_tp_worker_together():
    """The settings' figure is one TP worker's; a token loaded moves every worker's share."""
    hosts = lab_hosts()
    for me in (h for h in hosts.values() if h.is_inference):
        g = next(g for g in files.group_figures(hosts) if g.name == targets.cache_group(me))
        tp = me.engine.tensor_parallel_size
        assert g.kv_bytes_per_token == me.lmcache.kv_bytes_per_token * tp


def test_engine_down_for_and_haproxy_exporters_settings():
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)
    m = settings.load(data, "prom1", ("monitoring", "lab")).monitoring
    assert (m.engine_down_for, m.haproxy_exporters) == ("5m", ())
    rendered = files.rendered(lab_hosts(), IPS, targets.ScrapeOptions("/x", False), **{
        "engine_down_for": "7m", "haproxy_exporters": ("ceph1:8405",)
    })  # fmt: skip
    down = yaml.safe_load(rendered["rules/kvceph-alerts.yml"])["groups"][0]["rules"][0]
    assert (down["alert"], down["for"]) == ("KvcephEngineDown", "7m")
    assert json.loads(rendered[targets.HAPROXY_FILE])[0]["targets"] == ["ceph1:8405"]
    for key, value in (
        ("kvceph_alert_engine_down_for", "30s"),
        ("kvceph_haproxy_exporters", ["x"]),
    ):
        with pytest.raises(settings.reader.SettingsError) as e:
            settings.load({**data, key: value}, "prom1", ("monitoring", "lab"))
        assert str(e.value).startswith(f"prom1: {key} = ") and "\n" not in str(e.value)


def test_promtool_router_alerts(tmp_path):
    """One router of two down: a warning only; both down: critical, per route."""
    write(tmp_path, {"router.yml": yaml.safe_dump({"groups": [rules.router_alert_rules()]})})
    job = rules.ROUTER_JOB

    def up(host, values):
        return {"series": f'up{{job="{job}",host="{host}",route="8100"}}', "values": values}

    warn = {"severity": "warning", "service": "kvceph", "job": job, "route": "8100"}
    case = {
        "interval": "1m",
        # ceph1 goes down at 5m, gpu1 too at 10m
        "input_series": [up("ceph1", "1x5 0x20"), up("gpu1", "1x10 0x15")],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "KvcephRouterDown", "exp_alerts": []},
            {"eval_time": "8m", "alertname": "KvcephNoRouter", "exp_alerts": []},
            {
                "eval_time": "8m",
                "alertname": "KvcephRouterDown",
                "exp_alerts": [
                    {
                        "exp_labels": {**warn, "host": "ceph1"},
                        "exp_annotations": {
                            "summary": "router route :8100 on ceph1 does not answer: its "
                            "clients must use another router",
                            "fix": "systemctl status / journalctl -u kvceph-router@8100 on "
                            "the host",
                        },
                    }
                ],
            },
            {
                "eval_time": "12m",
                "alertname": "KvcephNoRouter",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "critical",
                            "service": "kvceph",
                            "route": "8100",
                        },
                        "exp_annotations": {
                            "summary": "no router instance of route :8100 answers",
                            "fix": 'clients to the engines directly (docs/router.md "Fallback"); '
                            "systemctl status kvceph-router@8100 on every router host",
                        },
                    }
                ],
            },
        ],
    }
    test = {"rule_files": ["router.yml"], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    out = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert "SUCCESS" in out
