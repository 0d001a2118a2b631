"""LMCache MP server monitoring (issue 51 item 4): the gate's path rendered into one engine per
MP host, the ``kvceph-mp-server`` job and its targets, one ``promtool test rules`` case per alert
of ``rules.mp_server_alerts``, and every MP query against the names a real server exported
(tests/fixtures/mp_server/metrics-h100-served.txt)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from test_monitoring import IPS, _exposed, _names, lab_hosts, promtool, write

from deploys import render
from deploys import settings as s
from deploys.monitoring import dashboard, files, rules, targets

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mp_server"
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
MP = {**BASE, "kvceph_engine_preset": "vllm-0.34-mp", "kvceph_accept_mp_serve_defect": True}
TWO = [
    {"name": "a", "devices": [0, 1], "port": 8000},
    {"name": "b", "devices": [2, 3], "port": 8001},
]


def mp_host(name="gpu1", **data):
    return s.load(
        {**MP, "kvceph_engines": TWO, "kvceph_accelerator_count": 4, **data}, name, ("gpu",)
    )


def test_only_the_first_engine_of_an_mp_host_gets_the_servers_url():
    me = mp_host()
    first, second = (dict(render.environment(me, None, e)) for e in me.engine.engines)
    assert first[render.MP_METRICS_VAR] == "http://127.0.0.1:8090/metrics"
    assert render.MP_METRICS_VAR not in second
    inproc = s.load(BASE, "gpu1", ("gpu",))
    assert render.MP_METRICS_VAR not in dict(render.environment(inproc))
    # without the gate nothing would serve it
    off = mp_host(kvceph_vllm_guard=False)
    assert render.MP_METRICS_VAR not in dict(render.environment(off, None, off.engine.engines[0]))


def test_targets_mp_hosts_only_through_the_first_engines_port():
    mp, inproc = mp_host("gpu1"), s.load(BASE, "gpu2", ("gpu",))
    off = mp_host("gpu3", kvceph_vllm_guard=False)
    found = targets.mp_targets([(inproc, "10.0.0.2"), (mp, "10.0.0.1"), (off, "10.0.0.3")])
    assert found == [
        {
            "targets": ["10.0.0.1:8000"],
            "labels": {"host": "gpu1", "engine": "a", "cache_group": targets.cache_group(mp)},
        }
    ]
    # in-process hosts' engine targets are unchanged
    assert len(targets.engine_targets([(inproc, "10.0.0.2")])) == 1


def test_the_job_reads_the_gates_path_with_the_engines_key():
    o = targets.ScrapeOptions(directory="/p", api_key=True, interval="15s")
    jobs = {j["job_name"]: j for j in targets.scrape_configs(o)}
    mp, engines = jobs[rules.MP_JOB], jobs[rules.ENGINES_JOB]
    assert mp["metrics_path"] == targets.MP_METRICS_PATH == "/kvceph/mp-server/metrics"
    assert mp["authorization"] == engines["authorization"]
    assert mp["authorization"] is not engines["authorization"]  # no YAML alias in the file
    assert mp["file_sd_configs"] == [{"files": ["/p/mp-server.json"]}]
    assert mp["scrape_interval"] == "15s"
    assert "&id" not in yaml.safe_dump(targets.scrape_configs(o))


def test_an_inventory_without_mp_hosts_gets_no_targets_and_no_alerts():
    out = files.rendered(lab_hosts(), IPS, targets.ScrapeOptions("/x", False))
    assert json.loads(out[targets.MP_FILE]) == []
    assert yaml.safe_load(out["rules/kvceph-mp-server.yml"])["groups"][0]["rules"] == []
    hosts = {"gpu1": mp_host()}
    out = files.rendered(hosts, {"gpu1": "10.0.0.1"}, targets.ScrapeOptions("/x", False))
    assert len(json.loads(out[targets.MP_FILE])) == 1
    group = yaml.safe_load(out["rules/kvceph-mp-server.yml"])["groups"][0]
    assert [r["alert"] for r in group["rules"]] == [
        "KvcephMPServerDown",
        "KvcephMPServerL2Off",
        "KvcephMPServerNoWorker",
    ]


def test_every_mp_query_reads_names_the_real_server_exported():
    served = _exposed((FIXTURES / "metrics-h100-served.txt").read_text())
    queries = [r["expr"] for r in rules.mp_server_alerts()["rules"]]
    board = dashboard.dashboard("default.rgw.buckets.data")
    panel = next(p for p in board["panels"] if p["id"] == 10)
    queries += [t["expr"] for t in panel["targets"]]
    read = {n for q in queries for n in _names(q)}  # ("up" is Prometheus' own)
    assert read and read - served == set()
    assert {rules.MP_REQUESTED, rules.MP_HIT, rules.MP_STORES, rules.MP_L2_ADAPTERS} <= read
    # the panel is labelled by the server's own labels
    assert all("by (model_name, cache_salt)" in t["expr"] for t in panel["targets"])
    assert re.search(r'lmcache_mp_lookup_hit_l2_tokens_total\{job="kvceph-mp-server"\}', str(panel))
    # a real server's labels: model_name and cache_salt on the hit counters
    text = (FIXTURES / "metrics-h100-served.txt").read_text()
    assert 'lmcache_mp_lookup_hit_l1_tokens_total{cache_salt="",model_name=' in text


# promtool: host gpu1's server scraped through engine a's gate.
MPJOB = {"job": rules.MP_JOB, "instance": "gpu1:8000", "host": "gpu1", "engine": "a"}
ENG = {"job": rules.ENGINES_JOB, "instance": "gpu1:8000", "host": "gpu1", "engine": "a"}
LABELS = {"cache_salt": "", "model_name": "m"}


def _s(name: str, labels: dict, values: str) -> dict:
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{text}}}", "values": values}


def _fires(alert: str, at: str, labels: dict) -> dict:
    rule = next(r for r in rules.mp_server_alerts()["rules"] if r["alert"] == alert)

    def expand(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)

    exp = {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: expand(v) for k, v in rule["annotations"].items()},
    }
    return {"eval_time": at, "alertname": alert, "exp_alerts": [exp]}


def _quiet(alert: str, *times: str) -> list[dict]:
    return [{"eval_time": t, "alertname": alert, "exp_alerts": []} for t in times]


def _case(name, series, checks) -> dict:
    return {"name": name, "interval": "1m", "input_series": series, "alert_rule_test": checks}


def cases() -> list[dict]:
    miss = lambda v: _s(rules.MP_REQUESTED, {**MPJOB, **LABELS}, v)  # noqa: E731
    hit = lambda v: _s(rules.MP_HIT, {**MPJOB, **LABELS}, v)  # noqa: E731
    stores = lambda v: _s(rules.MP_STORES, {**MPJOB, "device": "cuda:0"}, v)  # noqa: E731
    return [
        # the gate answers 502 from 5m: down past 2m fires; back at 12m
        _case(
            "KvcephMPServerDown",
            [_s("up", MPJOB, "1x5 0x6 1x10"), _s("up", ENG, "1x25")],
            [
                *_quiet("KvcephMPServerDown", "4m", "6m", "15m"),
                _fires("KvcephMPServerDown", "9m", MPJOB),
            ],
        ),
        # the engine (the gate) itself down: KvcephEngineDown's, not this one's
        _case(
            "MP server quiet while its engine is down",
            [_s("up", MPJOB, "1x5 0x15"), _s("up", ENG, "1x5 0x15")],
            _quiet("KvcephMPServerDown", "10m", "18m"),
        ),
        # the adapter drained away at 5m (state active 1 -> 0)
        _case(
            "KvcephMPServerL2Off",
            [
                _s(
                    rules.MP_L2_ADAPTERS,
                    {**MPJOB, "l1_tag": "_default", "state": "active"},
                    "1x5 0x10",
                ),
                _s(
                    rules.MP_L2_ADAPTERS,
                    {**MPJOB, "l1_tag": "_default", "state": "draining"},
                    "0x5 1x10",
                ),
            ],
            [
                *_quiet("KvcephMPServerL2Off", "4m", "8m"),
                _fires("KvcephMPServerL2Off", "12m", {"host": "gpu1"}),
            ],
        ),
        # lookups miss 256 tokens a minute, nothing stored since the start (the counter never
        # appeared: no worker registered), the engine up
        _case(
            "KvcephMPServerNoWorker",
            [miss("0+256x40"), hit("0x40"), _s("up", ENG, "1x40")],
            [
                *_quiet("KvcephMPServerNoWorker", "5m"),
                _fires("KvcephMPServerNoWorker", "30m", {"host": "gpu1"}),
            ],
        ),
        # stores run (a registered worker); then every lookup hits (nothing new to store); then
        # the server is idle: none of these pages
        _case(
            "MP server with a worker, full hits, idle",
            [
                miss("0+256x20 5120+256x20 10240x20"),
                hit("0x20 0+256x20 5120x20"),
                stores("0+1x20 20x40"),
                _s("up", ENG, "1x60"),
            ],
            _quiet("KvcephMPServerNoWorker", "15m", "35m", "58m"),
        ),
        # the host's engines down: no page from this alert (EngineDown's)
        _case(
            "MP no-worker quiet while the engines are down",
            [miss("0+256x40"), hit("0x40"), _s("up", ENG, "0x40")],
            _quiet("KvcephMPServerNoWorker", "30m"),
        ),
    ]


def test_promtool_one_case_per_mp_alert(tmp_path):
    write(tmp_path, {"mp.yml": yaml.safe_dump({"groups": [rules.mp_server_alerts()]})})
    all_cases = cases()
    named = {c["name"] for c in all_cases}
    assert {r["alert"] for r in rules.mp_server_alerts()["rules"]} <= named
    test = {"rule_files": ["mp.yml"], "evaluation_interval": "1m", "tests": all_cases}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    assert "SUCCESS" in promtool("test", "rules", "test.yml", cwd=tmp_path)
