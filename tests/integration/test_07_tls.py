"""TLS to RGW on the lab: https by default (lab CA in every host's trust store), a CA that does
not match stops the deploy in one line before any engine restarts, and the plain-HTTP variant
still deploys and verifies."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from conftest import INFERENCE, REPO, S3_SCHEME, pyinfra, ssh
from lmcache_log import trouble


def _main_pids() -> dict[str, str]:
    return {
        h: ssh(h, "systemctl show -p MainPID --value vllm.service").stdout.strip()
        for h in INFERENCE
    }


@pytest.mark.skipif(S3_SCHEME != "https", reason="the lab runs the http variant")
def test_engines_reach_rgw_over_tls_with_the_lab_ca(converged):
    for host in INFERENCE:
        config = yaml.safe_load(ssh(host, "cat /etc/kvceph/lmcache.yaml").stdout)
        # kvceph's connector (the default): TLS on to the bucket's name.
        extra = config["extra_config"]
        assert (extra["kvceph.endpoint"], extra["kvceph.tls"]) == ("lmcache.s3.kvlab:443", True)
        # The lab CA is in the system store: the bucket's name verifies from the host.
        out = ssh(
            host,
            "curl -s -o /dev/null -w '%{http_code}' https://lmcache.s3.kvlab:443/",
            check=False,
        ).stdout
        assert out in ("200", "403"), (host, out)
        # No S3 fault since the engine's current start (test_04's S3-off test trips the stock
        # connector's breaker on purpose in an earlier start of gpu1): neither LMCache's lines
        # nor kvceph's connector's (a TLS failure is a "connection" fault there).
        journal = ssh(
            host,
            "journalctl _SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value "
            "vllm.service) --no-pager -o cat",
        ).stdout
        assert [x for x in journal.splitlines() if trouble(x)] == [], host


@pytest.mark.skipif(S3_SCHEME != "https", reason="the lab runs the http variant")
def test_a_ca_that_does_not_match_stops_before_any_engine_restarts(converged, tmp_path):
    other = tmp_path / "other"
    subprocess.run(
        ["bash", str(REPO / "lab/tls/make-cert.sh"), str(other), "x", "DNS:x.invalid"], check=True
    )
    before = _main_pids()
    run = pyinfra("--data", f"kvceph_s3_ca_bundle={other / 'ca.pem'}", json_out=False)
    try:
        assert run.rc != 0
        lines = [
            line
            for line in run.output.splitlines()
            if "TLS to lmcache.s3.kvlab:443: certificate chain not trusted" in line
        ]
        assert lines, run.output[-4000:]
        # One line per host: host, endpoint, the certificate problem, the fix.
        for host in INFERENCE:
            assert any(f"kvceph: {host}: TLS to lmcache.s3.kvlab:443" in line for line in lines)
        assert all("fix:" in line for line in lines if "kvceph:" in line)
        assert _main_pids() == before, "an engine restarted with an untrusted certificate"
    finally:
        repair = pyinfra()
    assert repair.rc == 0, repair.output[-4000:]
    assert pyinfra().changed() == []


def test_plain_http_variant_deploys_and_verifies(converged):
    """The S3 tier and verify.py over plain HTTP (KVCEPH_LAB_S3_SCHEME=http), then back."""
    other = "http" if S3_SCHEME == "https" else "https"
    env = {"KVCEPH_LAB_S3_SCHEME": other}
    run = pyinfra(env=env)
    assert run.rc == 0, run.output[-4000:]
    config = yaml.safe_load(ssh("gpu1", "cat /etc/kvceph/lmcache.yaml").stdout)
    assert config["extra_config"]["kvceph.tls"] is (other == "https")
    try:
        verified = pyinfra(deploy="verify.py", json_out=False, timeout=600, env=env)
        assert verified.rc == 0, verified.output[-5000:]
        assert "all checks passed" in verified.output
    finally:
        back = pyinfra()
    assert back.rc == 0, back.output[-4000:]
    assert pyinfra().changed() == []
