"""probe.py on the lab: it measures every inference host, leaves no object behind, and the
deploy prints the last verdict for a host whose engine it restarts."""

from __future__ import annotations

import json

from conftest import HOSTS, REPORTS, pyinfra, s3_client, ssh

INFERENCE = [h for h in HOSTS if h != "ceph1"]


def test_probe_measures_every_host_and_deletes_its_objects(converged):
    run = pyinfra(deploy="probe.py", json_out=False, timeout=600)
    assert run.rc == 0, run.output[-5000:]
    assert "verify/probe" in run.output  # the table
    report = json.loads((REPORTS / "probe-latest.json").read_text())
    by_host = {r["host"]: r for r in report["hosts"]}
    assert sorted(by_host) == sorted(INFERENCE)
    for host, r in by_host.items():
        assert "error" not in r, (host, r)
        assert r["deleted"] == r["objects"] > 0, (host, r)
        assert r["up_gb_per_s"] > 0 and r["down_gb_per_s"] > 0
        # the lab model: 64 B/token/worker x 256 tokens (TP 2), 128 x 256 on gaudi1 (TP 1)
        assert r["chunk_bytes"] == 256 * (128 if host == "gaudi1" else 64)
        assert [p["tokens"] for p in r["prompts"]] == [8192, 32768, 131072]
    # The probe writes under each cache group's own names (its key may write no other).
    listed = s3_client().list_objects_v2(Bucket="lmcache").get("Contents", [])
    assert [o["Key"] for o in listed if "kvceph-probe-" in o["Key"]] == []


def test_deploy_prints_the_last_verdict_when_it_restarts_an_engine(converged):
    ssh("gpu2", "systemctl stop vllm")
    run = pyinfra(json_out=False)
    assert run.rc == 0, run.output[-5000:]
    lines = [x for x in run.output.splitlines() if "last cache probe" in x or "cache probe" in x]
    assert any("gpu2" in x for x in lines), run.output[-3000:]
    assert not any("gpu1" in x for x in lines)  # gpu1 did not restart
