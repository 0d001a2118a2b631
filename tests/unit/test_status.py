"""status.py's pure parts against recorded real answers: counters from the lab engine's and a
real vLLM 0.26's /metrics (tests/facts/status.EngineAnswers), the lab engine's names against
vLLM's, savings, drift by setting, reports, the document's rows, table, JSON and chart."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deploys import paths, render
from deploys import settings as s
from deploys.facts.status import EngineAnswers
from deploys.monitoring import counters, metrics, savings
from deploys.operations.orch_readback import read_service
from deploys.settings.inventory import CacheGroup
from deploys.settings.secrets import S3Credentials, Secret
from deploys.status import document, drift, output, reports
from deploys.tier import remote_tier

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "tests" / "facts" / "status.EngineAnswers"
REC = ROOT / "tests" / "fixtures" / "ceph-tentacle-20.2.4"
CREDS = S3Credentials(Secret("AKIALMCACHE0000"), Secret("s3cr3t/+Key0000"), "test")
sys.path.insert(0, str(ROOT / "lab" / "engine" / "src"))


def host(name="gpu1", group="gpu", **data):
    return s.load({"kvceph_s3_endpoint_ip": "10.0.0.5", **data}, name, (group,))


def answers(case: str) -> dict:
    fixture = json.loads((FACTS / f"{case}.json").read_text())
    return EngineAnswers().process(fixture["output"])


def metrics_text(case: str) -> str:
    fixture = json.loads((FACTS / f"{case}.json").read_text())
    return json.loads(fixture["output"][-1])["metrics"]


# --- counters -------------------------------------------------------------------------------


def test_real_vllm_026_counters_after_a_warm_request():
    c = counters.from_dict(answers("vllm-0.26-h200-warm-sync")["counters"])
    assert (c.external_queries, c.external_hits, c.loaded_tokens) == (16450, 16384, 16384)
    assert c.hit_ratio == pytest.approx(16384 / 16450)
    assert c.reused_tokens == 16384
    # The recording kept no request_success line: said, never shown as zero requests.
    assert c.requests is None and counters.missing(c) == ["vllm:request_success"]


def test_real_vllm_026_local_queries_count_scheduler_passes_not_tokens():
    # An async lookup that timed out: LMCache claimed nothing, the request waited and vLLM's
    # own prefix cache was queried on every scheduler pass (3.7 M "tokens" for one request).
    c = counters.from_dict(answers("vllm-0.26-h200-warm-async-timeout")["counters"])
    assert c.external_hits == 0 and c.reused_tokens == 0 and c.hit_ratio == 0
    assert c.local_queries > 200 * c.prompt_tokens


def test_lab_engine_counters_after_verify_cross_node():
    c = counters.from_dict(answers("lab-engine-after-cross-node")["counters"])
    assert c.requests == 3 and c.external_hits == c.loaded_tokens == 16384
    assert counters.missing(c) == []


def _series(text: str) -> dict[str, set[tuple[str, ...]]]:
    out: dict[str, set[tuple[str, ...]]] = {}
    for sample in metrics.parse(text):
        out.setdefault(sample.name, set()).add(tuple(sorted(sample.labels)))
    return out


def _label_order(text: str) -> set[str]:
    return {line.split("{", 1)[1].split("}")[0] for line in text.splitlines() if "{" in line}


def test_lab_engine_names_labels_and_order_are_vllm_026s():
    from kvceph_lab_engine.metrics import Metrics

    m = Metrics("probe")
    m.record_prefill(prompt=16450, local_hit=0, claimed=16384, loaded=16384, computed=66)
    m.record_finish(8, "length")
    lab_text = m.render()
    real = _series(metrics_text("vllm-0.26-h200-warm-sync"))
    lab = _series(lab_text)
    # Every series the real engine exposed that the lab engine has: same labels.
    shared = sorted(set(real) & set(lab))
    assert {f"{n}_total" for n in (counters.QUERIES, counters.HITS, counters.LOCAL_QUERIES)} <= set(
        shared
    )
    assert "vllm:prompt_tokens_by_source_total" in shared
    for name in shared:
        assert lab[name] == real[name], name
    # prometheus_client writes labels sorted by name: so does the lab engine.
    real_sets = _label_order(metrics_text("vllm-0.26-h200-warm-sync"))
    assert 'engine="0",model_name="probe",source="external_kv_transfer"' in real_sets
    assert 'engine="0",model_name="probe",source="external_kv_transfer"' in _label_order(lab_text)
    # vLLM 0.26's FinishReason: five series, one per reason.
    reasons = {x.labels["finished_reason"] for x in metrics.parse(lab_text) if "finished" in str(x)}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    c = counters.from_text(lab_text)
    assert (c.external_queries, c.external_hits, c.loaded_tokens, c.requests) == (
        16450,
        16384,
        16384,
        1,
    )


def test_engine_answers_without_metrics():
    a = answers("engine-stopped")
    assert a["counters"] is None and "Connection refused" in a["error"]


# --- savings --------------------------------------------------------------------------------


def test_saved_time_with_one_configured_rate_is_flat_and_says_so():
    me = host(kvceph_prefill_tokens_per_s=5000)
    figure = savings.prefill_seconds_per_token(me, 16384, read=lambda path: None)
    assert figure.seconds_per_token == pytest.approx(1 / 5000) and not figure.measured
    assert "kvceph_prefill_tokens_per_s {16384: 5000}" in figure.source
    assert "straight line" in figure.source and "not measured on this fleet" in figure.source
    assert savings.saved_seconds(16384, figure) == pytest.approx(16384 / 5000)
    assert savings.saved_seconds(None, figure) is None


def test_saved_time_at_the_served_length_off_the_prefill_curve():
    # The defaults: H200 TP 1 at 16k and 128k (4100 and 2440 tokens/s): per token dearer long.
    me = host()
    short = savings.prefill_seconds_per_token(me, 16384, read=lambda path: None)
    long = savings.prefill_seconds_per_token(me, 131072, read=lambda path: None)
    assert short.seconds_per_token == pytest.approx(1 / 4100, rel=0.02)
    assert long.seconds_per_token == pytest.approx(1 / 2440, rel=0.02)
    assert "default prefill figures" in short.source and not short.measured
    # verify.py's cold prefill of this cache group joins the curve, and is said.
    cold = {"prompt_tokens": 4096, "cold_ttft_s": 0.5, "warm_ttft_s": 0.2, "kv_bytes": 1}
    seen = []
    fig = savings.prefill_seconds_per_token(me, 4096, read=lambda p: seen.append(p) or cold)
    assert fig.measured and "verify.py's cold prefill" in fig.source
    assert seen[0].name == "Qwen--Qwen3-32B-tp2.json"
    assert fig.seconds_per_token != short.seconds_per_token


# --- drift ----------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_drift_names_the_flag_and_its_setting():
    old, new = host(), host(kvceph_gpu_memory_utilization=0.5)
    changes = drift.unit_changes(paths.UNIT_PATH, _lines(render.unit(old)), render.unit(new))
    assert [(c["field"], c["running"], c["desired"], c["setting"]) for c in changes] == [
        ("--gpu-memory-utilization", "0.55", "0.5", "kvceph_gpu_memory_utilization")
    ]
    assert drift.unit_changes(paths.UNIT_PATH, _lines(render.unit(old)), render.unit(old)) == []


def test_drift_names_lmcache_keys_env_and_missing_files():
    old, new = host(), host(kvceph_lmcache_chunk_size=512, kvceph_python_hash_seed=7)
    lm = drift.lmcache_changes(
        paths.LMCACHE_PATH, _lines(render.lmcache_yaml(old)), render.lmcache_yaml(new)
    )
    assert ("chunk_size", "kvceph_lmcache_chunk_size") in [(c["field"], c["setting"]) for c in lm]
    env = drift.env_changes(
        paths.ENV_PATH, _lines(render.env_file(old, "a" * 64)), render.env_file(new, "b" * 64)
    )
    # The digest line differs too: it is the digest's own reason, not a setting.
    assert [(c["field"], c["running"], c["desired"], c["setting"]) for c in env] == [
        ("PYTHONHASHSEED", "(set)", "(set, differs)", "kvceph_python_hash_seed")
    ]
    assert drift.env_changes(paths.ENV_PATH, None, "X=1\n")[0]["field"] == "(file)"
    assert drift.text_changes("/x", ["a"], "a\n") == []


def test_cache_group_split_on_what_runs():
    group = CacheGroup("Qwen/Qwen3-32B", 2, ("gpu1", "gpu2"))
    in_use = {"gpu1": {"chunk_size": "256"}, "gpu2": {"chunk_size": "512"}}
    (split,) = drift.group_splits(in_use, [group])
    assert split["setting"] == "kvceph_lmcache_chunk_size"
    assert split["values"] == {"gpu1": "256", "gpu2": "512"}
    assert drift.group_splits({"gpu1": {"chunk_size": "256"}, "gpu2": {}}, [group]) == []


# --- reports --------------------------------------------------------------------------------


def test_last_verify_from_a_real_report(tmp_path):
    real = ROOT / "hw/h200/results/2026-12-01/verify-20261201T033220Z-f2009fb3cf89.json"
    (tmp_path / "verify-latest.json").write_text(real.read_text())
    now = datetime(2026, 12, 1, 4, 32, 20, tzinfo=UTC)
    v = reports.last_verify(tmp_path, now)
    assert (v["verdict"], v["run"], v["age_s"]) == ("pass", "20261201T033220Z-f2009fb3cf89", 3600)
    assert reports.last_verify(tmp_path / "none", now)["verdict"] == "never run"


def test_last_probe_per_host_is_the_newest_that_has_it(tmp_path):
    def probe(run, hosts):
        doc = {"run_id": run, "started": run.split("-")[0], "hosts": hosts}
        (tmp_path / f"probe-{run}.json").write_text(json.dumps(doc))

    probe("20261201T100000Z-aaaaaa", [{"host": "gpu1", "verdict": "pays"}, {"host": "gpu2"}])
    probe("20261201T110000Z-bbbbbb", [{"host": "gpu2", "verdict": "slower than recompute"}])
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    found = reports.last_probes(tmp_path, now)
    assert found["gpu1"]["run"].startswith("20261201T10") and found["gpu1"]["age_s"] == 7200
    assert found["gpu2"]["verdict"] == "slower than recompute"
    assert reports.age(None) == "-" and reports.age(30) == "30 s" and reports.age(7200) == "2.0 h"


# --- document, table, JSON, chart ------------------------------------------------------------


def _engine_read(me, case="lab-engine-after-cross-node", reasons=(), changes=()):
    e = me.engine.engines[0]
    return {
        "versions": {"python": "3.11.2", "packages": {"lmcache": "0.5.6", "vllm": "0.33.0"}},
        "cache_key": {"chunk_size": "256"},
        "engines": [
            {
                "engine": e.name,
                "unit": e.unit,
                "port": e.port,
                "state": {"main_pid": 42, "digest": "d" * 64},
                "times": {"active": "active", "sub": "running", "since": "Tue 2026-12-01"},
                "desired_digest": "d" * 64 if not reasons else "e" * 64,
                "reasons": list(reasons),
                "settings": list(changes),
                "answers": answers(case),
            }
        ],
    }


def _cluster_read(bucket_case="lab-bucket-with-chunks"):
    usage = json.loads((ROOT / f"tests/facts/status.BucketUsage/{bucket_case}.json").read_text())
    daemons = json.loads((ROOT / "tests/facts/status.RgwDaemons/lab-two-gateways.json").read_text())
    return {
        "mon": {"reachable": True, "health": "HEALTH_OK"},
        "endpoint": {"url": "https://127.0.0.1:443", "reachable": True, "status": 200},
        "user_bucket_quota": {"enabled": True, "max_size": 4 << 30},
        "lifecycle": [{"ID": "kvceph-expire", "Status": "Enabled", "Expiration": {"Days": 7}}],
        "bucket": usage["fact"],
        "daemons": daemons["fact"],
    }


def _doc(rows, cluster, tmp_path):
    doc = {
        "run": "20261201T120000Z-abcdef",
        "engines": rows,
        "cluster": cluster,
        "cache_group_splits": [],
        "inference_hosts": sorted({r["host"] for r in rows}),
        "verify": reports.last_verify(tmp_path, datetime.now(UTC)),
        "probes": {},
        "prefill_note": "flat",
        "totals": document.totals(rows),
    }
    doc["problems"] = document.problems(doc)
    doc["partial"] = bool(doc["problems"])
    return doc


def test_rows_fields_and_saved_time(tmp_path):
    me = host(kvceph_prefill_tokens_per_s=5000)
    (row,) = document.engine_rows("gpu2", me, _engine_read(me), None, None)
    assert row["reachable"] and not row["drift"] and row["health"] == 200
    assert (row["vllm"], row["lmcache"], row["requests"]) == ("0.33.0", "0.5.6", 3)
    assert row["saved_gpu_seconds"] == pytest.approx(16384 / 5000)
    assert "not measured" in row["prefill_source"]
    cluster = document.cluster_row("ceph1", host("ceph1", "ceph_admin"), _cluster_read(), None)
    assert (cluster["objects"], cluster["bytes"], cluster["quota_bytes"]) == (16, 262144, 4 << 30)
    assert cluster["quota_source"] == "user's bucket quota" and cluster["lifecycle_present"]
    assert cluster["lifecycle_expiration_days"] == 7 and cluster["rgw_daemons_up"] == 2
    doc = _doc([row], cluster, tmp_path)
    assert not doc["partial"]
    text = output.table(doc)
    assert "16384/16394" in text and "gw1 on ceph1" in text and "262144" not in text
    assert "256.0 KiB of 4.0 GiB quota" in text
    path = output.write_json(doc, tmp_path / "s.json")
    assert json.loads(path.read_text())["totals"]["reused_tokens"] == 16384
    png, notice = output.write_png(doc, tmp_path / "s.png")
    assert notice is None and png.stat().st_size > 10_000


def test_a_full_user_quota_says_quota_full_and_since_when(tmp_path):
    # The lab bucket's 16 chunks of 16 KiB (262144 bytes) against a user quota one chunk above.
    read = {
        **_cluster_read(),
        "user_quota": {"enabled": True, "max_size": 262144 + 16384},
        "user_stats": {"size": 262144, "objects": 16, "last_stats_update": "2026-12-03T18:20Z"},
    }
    cluster = document.cluster_row("ceph1", host("ceph1", "ceph_admin"), read, None)
    assert (cluster["quota_source"], cluster["quota_full"]) == ("user quota", True)
    assert cluster["quota_full_since"] == "2026-12-03T18:20Z"
    text = output.table(_doc([], cluster, tmp_path))
    assert "quota full since 2026-12-03T18:20Z" in text
    roomy = {**read, "user_quota": {"enabled": True, "max_size": 4 << 30}}
    cluster = document.cluster_row("ceph1", host("ceph1", "ceph_admin"), roomy, None)
    assert cluster["quota_full"] is False and "quota full" not in output.table(
        _doc([], cluster, tmp_path)
    )


def test_drift_row_names_the_setting(tmp_path):
    me = host()
    change = {
        "file": paths.UNIT_PATH,
        "field": "--gpu-memory-utilization",
        "running": "0.55",
        "desired": "0.5",
        "setting": "kvceph_gpu_memory_utilization",
    }
    read = _engine_read(me, reasons=["running digest differs"], changes=[change])
    (row,) = document.engine_rows("gpu2", me, read, None, None)
    assert row["drift"]
    text = output.table(_doc([row], None, tmp_path))
    assert "DRIFT: --gpu-memory-utilization 0.55 -> 0.5 (kvceph_gpu_memory_utilization)" in text


def test_unreachable_host_is_a_row_and_the_status_is_partial(tmp_path):
    me = host()
    rows = document.engine_rows("gpu1", me, _engine_read(me), None, None)
    rows += document.engine_rows("gpu2", me, None, None, "unreachable: SSH connect failed")
    doc = _doc(rows, None, tmp_path)
    assert doc["partial"] and doc["problems"] == [
        "gpu2 vllm.service: unreachable: SSH connect failed"
    ]
    assert doc["totals"]["engines_read"] == 1
    text = output.table(doc)
    assert "UNREACHABLE: SSH CONNECT FAILED" in text and text.splitlines()[-1].startswith("PARTIAL")
    stopped = document.engine_rows("gpu2", me, _engine_read(me, "engine-stopped"), None, None)
    assert stopped[0]["metrics_error"] and document.problems(_doc(stopped, None, tmp_path))


def _recorded(name: str) -> tuple[int, list[str]]:
    lines = (REC / f"{name}.txt").read_text().splitlines()
    rc = int(lines[-1].split("kvceph-rc=")[1])
    last = lines[-1].split("kvceph-rc=")[0]
    return rc, [line for line in lines[:-1] + [last] if line]


def test_cephadm_services_from_a_real_orchestrator():
    # Ceph 20.2.4: the RGW service and its ingress, both running (recorded answers).
    def run(command):
        text = command.get_raw_value()
        if "ingress" in text:
            return _recorded("ls_ingress_ok" if " orch ls " in text else "ps_ingress_ok")
        return _recorded("ls_plain" if " orch ls " in text else "ps_plain")

    t = {"connect_timeout": 5, "command_timeout": 60}
    read = {
        **_cluster_read(),
        "orchestrator": {"available": True, "backend": "cephadm"},
        "services": {n: read_service(run, n, t) for n in ("rgw.standard", "ingress.rgw.standard")},
    }
    me = host("ceph1", "ceph_admin", kvceph_rgw_managed_by="cephadm")
    row = document.cluster_row("ceph1", me, read, None)
    assert row["orchestrator"] == "cephadm"
    rgw, ingress = row["services"]["rgw.standard"], row["services"]["ingress.rgw.standard"]
    assert rgw["running"] == rgw["size"] == 2 and ingress["running"] == ingress["size"] == 2
    assert "service ingress.rgw.standard: 2/2 running" in "\n".join(
        output.cluster_lines({"cluster": row})
    )


def test_drift_never_shows_a_secret_looking_value_and_names_other_unit_lines():
    env = drift.env_changes("/e", ["MY_TOKEN=old"], "MY_TOKEN=new\n")
    assert [(c["running"], c["desired"]) for c in env] == [("(set)", "(set, differs)")]
    unit = render.unit(host())
    changed = unit.replace("Restart=", "Restart=no\n#Restart=", 1)
    assert changed != unit
    (c,) = drift.unit_changes(paths.UNIT_PATH, _lines(changed), unit)
    assert c["field"].startswith("unit lines ") and "Restart" in c["field"]


def test_hosts_left_out_with_limit_are_rows_not_problems(tmp_path):
    me = host()
    rows = document.engine_rows("gpu1", me, _engine_read(me), None, None)
    rows += document.engine_rows("gpu2", me, None, None, document.OUTSIDE)
    cluster = document.cluster_row("ceph1", host("ceph1", "ceph_admin"), None, document.OUTSIDE)
    doc = _doc(rows, cluster, tmp_path)
    assert not doc["partial"] and "OUTSIDE THIS RUN" in output.table(doc)


def test_a_crash_loop_at_its_start_limit_is_named_with_the_fix(tmp_path):
    me = host()
    read = _engine_read(me, case="engine-stopped")
    times = json.loads((ROOT / "tests/facts/status.UnitTimes/crash-loop-stopped.json").read_text())
    read["engines"][0]["times"] = times["fact"]
    (row,) = document.engine_rows("gpu2", me, read, None, None)
    assert (row["active"], row["result"], row["restarts"]) == ("failed", "exit-code", 4)
    text = output.table(_doc([row], None, tmp_path))
    assert (
        "CRASH LOOP gpu2 vllm.service: systemd stopped restarting it at its start limit "
        "(4 restarts, last result exit-code); fix: journalctl -u vllm.service on gpu2, then "
        "rerun the deploy (it resets the limit)" in text
    )
    # Newer systemd names it: the same line.
    row.update(result="start-limit-hit")
    assert "CRASH LOOP gpu2 vllm.service" in output.table(_doc([row], None, tmp_path))
    # A unit stopped by hand that failed its stop (no automatic restart) is no crash loop.
    row.update(result="exit-code", restarts=0)
    assert "CRASH LOOP" not in output.table(_doc([row], None, tmp_path))
    row.update(active="active", result="success", restarts=2)
    assert "RESTARTED gpu2 vllm.service: 2 automatic restart(s)" in output.table(
        _doc([row], None, tmp_path)
    )


def test_s3_turned_off_is_one_line_with_its_time_and_what_happens_next(tmp_path):
    me = host()
    read = _engine_read(me)
    fixture = json.loads(
        (ROOT / "tests/facts/connector.S3Disabled/lab_engine_disabled.json").read_text()
    )
    read["engines"][0]["s3_off"] = fixture["fact"]
    (row,) = document.engine_rows("gpu1", me, read, None, None)
    assert row["s3_disabled_at"] == fixture["fact"]["at"]
    doc = _doc([row], None, tmp_path)
    # Not a read that failed: the status is complete.
    assert not doc["partial"]
    (line,) = [x for x in output.table(doc).splitlines() if x.startswith("S3 OFF")]
    shown = remote_tier.shown_time(fixture["fact"]["at"])
    assert line == (
        f"S3 OFF gpu1 vllm.service since {shown}: LMCache disabled its S3 connection after "
        "connection errors; it recomputes every request until restarted; the next deploy "
        "restarts it in its roll once the S3 endpoint answers"
    )
    assert (
        json.loads(output.write_json(doc, tmp_path / "s.json").read_text())["engines"][0][
            "s3_disabled_at"
        ]
        == fixture["fact"]["at"]
    )
    # Not logged, or not read (kvceph's connector): no line.
    for s3_off in ({"started": True, "at": None, "line": None}, None):
        read["engines"][0]["s3_off"] = s3_off
        (row,) = document.engine_rows("gpu1", me, read, None, None)
        assert row["s3_disabled_at"] is None
        assert "S3 OFF" not in output.table(_doc([row], None, tmp_path))


def test_crc32c_refused_is_the_connectors_own_count_with_its_time(tmp_path):
    me = host(kvceph_lmcache_connector="kvceph")  # the check is on by default
    read = _engine_read(me)
    fixture = json.loads((ROOT / "tests/facts/connector.Crc32cRefused/refused.json").read_text())
    read["engines"][0]["crc32c_refused"] = fixture["fact"]
    (row,) = document.engine_rows("gpu1", me, read, None, None)
    assert row["crc32c_refused"] == {"refused": 3, "checked": 9, "at": fixture["fact"]["at"]}
    (line,) = [x for x in output.table(_doc([row], None, tmp_path)).splitlines() if "CRC" in x]
    assert line == (
        "CRC32C REFUSED gpu1 vllm.service: 3 GET bodies did not match the crc32c stored with "
        "them (each a miss, recomputed; 9 checked; the connector's count at "
        f"{remote_tier.shown_time(fixture['fact']['at'])}, logged at most once a minute): find "
        "what alters objects between RGW and the engine"
    )
    # None refused, or not read (the check off): no line.
    for fact in ({"started": True, "at": None, "refused": None, "checked": None}, None):
        read["engines"][0]["crc32c_refused"] = fact
        (row,) = document.engine_rows("gpu1", me, read, None, None)
        assert "CRC32C" not in output.table(_doc([row], None, tmp_path))
    assert row["crc32c_refused"] is None


def test_puts_skipped_is_the_connectors_own_count_with_its_time(tmp_path):
    me = host(kvceph_lmcache_connector="kvceph", kvceph_skip_short_puts=True)
    read = _engine_read(me)
    fixture = json.loads(
        (ROOT / "tests/facts/connector.PutsSkipped/lab_engine_skipped.json").read_text()
    )
    read["engines"][0]["puts_skipped"] = fixture["fact"]
    (row,) = document.engine_rows("gpu1", me, read, None, None)
    assert row["puts_skipped"] == {"skipped": 1, "stored": 0, "at": fixture["fact"]["at"]}
    (line,) = [x for x in output.table(_doc([row], None, tmp_path)).splitlines() if "puts " in x]
    assert line == (
        "puts skipped gpu1 vllm.service (kvceph_skip_short_puts): 1 chunks seen only below the "
        "crossover not written, 0 written (the connector's count at "
        f"{remote_tier.shown_time(fixture['fact']['at'])}; it logs at most once a minute)"
    )
    read["engines"][0]["puts_skipped"] = {"started": True, "at": None, "skipped": None,
                                          "stored": None}  # fmt: skip
    (row,) = document.engine_rows("gpu1", me, read, None, None)
    assert "none logged since the engine started" in output.table(_doc([row], None, tmp_path))
    # Off (not read): no line.
    read["engines"][0]["puts_skipped"] = None
    (row,) = document.engine_rows("gpu1", me, read, None, None)
    assert row["puts_skipped"] is None
    assert "puts skipped" not in output.table(_doc([row], None, tmp_path))
