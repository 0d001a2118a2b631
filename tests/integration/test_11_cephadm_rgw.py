"""The RGW stage against the real orchestrator: the cephadm lab (KVCEPH_LAB_CEPH=cephadm,
Ceph 20.2.4 managed by cephadm inside ceph1, RGW behind cephadm's ingress on the lab VIP)."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

import pytest
from conftest import CEPHADM, LAB_DIR, S3_SCHEME, pyinfra, s3_status, ssh

pytestmark = pytest.mark.skipif(
    not CEPHADM, reason="needs the cephadm lab (KVCEPH_LAB_CEPH=cephadm)"
)
REFUSAL = "ServiceSpec: RGWSpec.__init__() got an unexpected keyword argument 'concentrator'"
RGW_SPEC = "RGW service | Apply the rgw.standard spec (read back: exported, all daemons running)"


# Quarantined under CI (CI=true), run everywhere else: intermittent on the cephadm lab, 2 of the
# last 5 runs of this module (2026-12-01): one of the first deploy's two RGW daemons ends in
# `error`, the orchestrator stops refreshing (`ceph orch ls` REFRESHED minutes ago, "stray
# daemons" in health), so a count change never converges and only one daemon can be stopped.
# Cause not found yet; issue 23 (the orchestrator's faults on the cephadm lab) owns it.
ORCHESTRATOR_STALL = pytest.mark.skipif(
    os.environ.get("CI") == "true", reason="intermittent orchestrator stall on the cephadm lab"
)


def orch(*args: str) -> list | dict:
    out = ssh("ceph1", "timeout 60 ceph " + " ".join(args) + " -f json").stdout
    return json.loads(out) if out.strip().startswith(("[", "{")) else []


def rgw_daemons() -> list[tuple[str, str]]:
    return sorted(
        (d["daemon_name"], d["status_desc"]) for d in orch("orch ps --service_name rgw.standard")
    )


def exported() -> dict:
    return orch("orch ls --service_name rgw.standard --export")[0]


def errors(run) -> list[str]:
    return [line for line in run.output.splitlines() if line.startswith("--> ") and "rror" in line]


def test_concentrator_refused_by_the_cluster_stops_before_anything(converged):
    before = exported()
    # Concentrator wanted, no VIP to fall back to: the dry run's refusal stops the run.
    run = pyinfra("--data", "kvceph_rgw_ingress_virtual_ip=null")
    assert run.rc != 0
    (line,) = [e for e in errors(run) if "concentrator" in e]
    assert "Ceph 20.2.4 (tentacle, announced with concentrators)" in line
    assert REFUSAL in line and "kvceph_rgw_ingress_virtual_ip" in line
    assert run.changed() == []
    assert "Starting operation: Ceph pools" not in run.output
    assert exported() == before


def test_forced_concentrator_is_reported_as_the_failure_it_is(converged):
    before = exported()
    run = pyinfra("--data", "kvceph_allow_unprobed_concentrator=true")
    assert run.rc != 0
    assert f"kvceph: ceph orch apply rgw.standard refused: {REFUSAL}" in run.output
    assert (RGW_SPEC, "ceph1") not in run.changed()
    assert exported() == before  # the orchestrator stored nothing


@ORCHESTRATOR_STALL
@pytest.mark.parametrize("count", [1, 2])
def test_count_per_host_converges(converged, count):
    run = pyinfra("--data", f"kvceph_rgw_count_per_host={count}")
    assert run.rc == 0, run.output[-4000:]
    daemons = rgw_daemons()
    assert [s for _, s in daemons] == ["running"] * count, daemons
    assert exported()["placement"]["count_per_host"] == count
    again = pyinfra("--data", f"kvceph_rgw_count_per_host={count}")
    assert again.rc == 0 and again.changed() == [], again.changed()


@ORCHESTRATOR_STALL
def test_a_stopped_rgw_daemon_leaves_s3_up_through_haproxy(converged):
    name, _ = rgw_daemons()[0]
    ssh("ceph1", f"timeout 60 ceph orch daemon stop {name}")
    try:
        deadline = time.monotonic() + 120
        while dict(rgw_daemons()).get(name) == "running" and time.monotonic() < deadline:
            time.sleep(3)
        assert dict(rgw_daemons())[name] != "running"
        # Every request through the VIP answers while one backend is down (haproxy retries).
        codes = [s3_status() for _ in range(20)]
        assert codes == ["200"] * 20, codes
        run = pyinfra()
        assert run.rc == 0, run.output[-4000:]
        assert "Readiness check | Engine answers on port 8000" in run.output
    finally:
        ssh("ceph1", f"timeout 60 ceph orch daemon start {name}", check=False)


@pytest.mark.parametrize("port", [8090, 8080])
def test_frontend_port_change_converges_and_ingress_follows(converged, port):
    run = pyinfra("--data", f"kvceph_rgw_frontend_port={port}")
    assert run.rc == 0, run.output[-4000:]
    assert exported()["spec"]["rgw_frontend_port"] == port
    ports = sorted(p for d in orch("orch ps --service_name rgw.standard") for p in d["ports"])
    assert ports == [port, port + 1], ports
    # cephadm rewrites haproxy's backends: S3 answers through the VIP on the new ports.
    assert s3_status() == "200"


@pytest.mark.skipif(S3_SCHEME != "https", reason="the lab runs the http variant")
def test_ingress_tls_key_is_compared_by_hash_and_never_shown(converged):
    """haproxy serves the lab CA's certificate on the VIP; the key is never in pyinfra's output."""
    assert s3_status() == "200"  # curl --cacert <lab CA>: the VIP's certificate verifies
    key_lines = (LAB_DIR / "tls" / "s3.key").read_text().splitlines()[1:-1]
    # -vvv prints every fact's and command's output: the spec export the plan compares with too.
    run = pyinfra("-vvv", json_out=False)
    assert run.rc == 0, run.output[-4000:]
    assert "ingress.rgw.standard already has this spec" in run.output
    assert "PRIVATE KEY" not in run.output
    assert not any(line in run.output for line in key_lines)


def test_rgw_dns_name_change_restarts_rgw_through_the_orchestrator(converged):
    """RGW reads rgw_dns_name only at start: a change restarts the service via the orchestrator.

    Run on ceph1 only (--limit): the lab certificate names *.s3.kvlab, so inference hosts would
    (rightly) fail their TLS check against another name; the RGW side is what is tested here.
    """

    def started_after(t0: datetime) -> list[tuple[str, str, bool]]:
        # Start times, not a before/after map: the orchestrator's daemon cache can still list
        # daemons a previous test replaced (port change) until its next refresh.
        return sorted(
            (d["daemon_name"], d["status_desc"], datetime.fromisoformat(d["started"]) > t0)
            for d in orch("orch ps --service_name rgw.standard")
        )

    def dns_name() -> str:
        return ssh("ceph1", "timeout 60 ceph config get client.rgw rgw_dns_name").stdout.strip()

    port = {"https": 443, "http": 80}[S3_SCHEME]
    other = (
        "--data", "kvceph_rgw_dns_name=s3b.kvlab",
        "--data", f"kvceph_s3_endpoint={S3_SCHEME}://s3b.kvlab:{port}",
        "--limit", "ceph1",
    )  # fmt: skip
    count = exported()["placement"]["count_per_host"]
    t0 = datetime.now(UTC)
    try:
        run = pyinfra(*other)
        assert run.rc == 0, run.output[-4000:]
        (op,) = [n for n, h in run.changed() if h == "ceph1" and "rgw_dns_name" in n]
        assert "s3b.kvlab" in op and "ceph orch restart" in op
        assert dns_name() == "s3b.kvlab"
        daemons = started_after(t0)
        assert [(s, new) for _, s, new in daemons] == [("running", True)] * count, daemons
        again = pyinfra(*other)
        assert again.rc == 0 and again.changed() == [], again.changed()
    finally:
        back = pyinfra("--limit", "ceph1")
    assert back.rc == 0, back.output[-4000:]
    assert dns_name() == "s3.kvlab"
    assert s3_status() == "200"
    # The inference hosts were never touched: the whole lab is converged as it was.
    assert pyinfra().changed() == []
