"""status.py's view of LMCache's MP server, against recorded real answers of LMCache 0.5.6's
``lmcache server`` (tests/fixtures/mp_server/ORIGIN.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from deploys import paths
from deploys import settings as s
from deploys.facts.status import MPServerAnswers
from deploys.monitoring import mp_server
from deploys.status import output

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "mp_server"
KVCEPH = json.loads((FIX / "status-kvceph.json").read_text())
STOCK = json.loads((FIX / "status-s3.json").read_text())
METRICS = (FIX / "metrics-s3.txt").read_text()


def test_kvcephs_plugin_server_is_healthy_with_its_l1_and_no_worker_yet():
    got = mp_server.summary(KVCEPH, METRICS)
    assert got["healthy"] is True
    assert (got["l1_used_bytes"], got["l1_total_bytes"]) == (0, 1 << 30)
    assert got["l2"] == [{"type": "KvcephMPConnector", "healthy": True, "disabled": False}]
    assert got["workers"] == 0
    # The idle recording exported no hit counters: shown as unknown, not as 0.
    assert got["l1_hits"] is None and got["l2_hits"] is None
    line = mp_server.line("gpu1", got)
    assert line == (
        "gpu1: LMCache MP server healthy, L1 0.00/1.00 GiB, L2 KvcephMPConnector ok, "
        "0 registered workers"
    )
    assert mp_server.problems({"gpu1": got}) == []


def test_the_stock_adapters_breaker_shows_as_l2_off():
    broken = copy.deepcopy(STOCK)
    (adapter,) = broken["storage_manager"]["l2_adapters"]
    adapter.update(is_healthy=False, connection_disabled=True, connection_failures=3)
    assert mp_server.summary(STOCK, METRICS)["l2"][0] == {
        "type": "S3L2Adapter",
        "healthy": True,
        "disabled": False,
    }
    got = mp_server.summary(broken, None)
    assert "L2 S3L2Adapter OFF" in mp_server.line("gpu1", got)
    assert mp_server.problems({"gpu1": got}) == [
        "gpu1: LMCache MP server's L2 S3L2Adapter is off: KV is not saved to S3"
    ]


def test_metric_sums_read_the_real_names_and_hits_when_exported():
    sums = mp_server.metric_sums(METRICS)
    assert sums["lmcache_mp_l2_store_adapters"] == 1.0  # active 1 + draining 0
    assert sums["lmcache_mp_l1_memory_usage_bytes"] == 0.0
    assert not any(k.startswith("python_") for k in sums)
    more = METRICS + f'{mp_server.L1_HITS}{{l1_tag="_default"}} 7.0\n{mp_server.L2_HITS} 3.0\n'
    got = mp_server.summary(KVCEPH, more)
    assert (got["l1_hits"], got["l2_hits"]) == (7.0, 3.0)
    assert mp_server.line("gpu1", got).endswith(", hits L1 7 L2 3")


def test_the_fact_reads_loopback_and_a_dead_server_is_a_problem():
    fact = MPServerAnswers()
    base = f"http://{paths.MP_HOST}:{paths.MP_HTTP_PORT}"
    assert "http://127.0.0.1:8090" in str(fact.command("/opt/venv/bin/python", base))
    answer = json.dumps({"status": KVCEPH, "metrics": METRICS, "error": None})
    assert fact.process([answer])["healthy"] is True
    dead = fact.process(
        ['{"status": null, "metrics": null, "error": "/status: URLError: refused"}']
    )
    assert dead["healthy"] is None
    assert mp_server.problems({"gpu1": dead}) == [
        "gpu1: LMCache MP server did not answer (/status: URLError: refused)"
    ]
    assert "did not answer" not in mp_server.line("gpu1", dead)  # the line names the error
    assert "URLError" in mp_server.line("gpu1", dead)


def test_in_process_hosts_show_no_mp_server_line():
    assert output.mp_server_lines({"mp_servers": {}}) == []
    assert output.mp_server_lines({}) == []
    me = s.load({"kvceph_s3_endpoint_ip": "10.0.0.5"}, "gpu1", ("gpu",))
    assert not me.engine.profile.mp


def test_the_hit_counters_a_served_server_exports_are_the_names_status_reads():
    served = (FIX / "metrics-h100-served.txt").read_text()
    sums = mp_server.metric_sums(served)
    # loan 12: requests served, every store refused: the counters exist, at 0
    assert sums[mp_server.L1_HITS] == 0 and sums[mp_server.L2_HITS] == 0
    assert "lmcache_mp_lookup_requested_tokens_total" in sums
