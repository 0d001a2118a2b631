"""LMCache MP mode on the lab (issue 51): the vllm-0.34-mp preset with the lab's stand-ins
(KVCEPH_LAB_ENGINE_MODE=mp, group_data/lab.py): kvceph's own lmcache-server.service runs
lab/engine's MP server with kvceph's KvcephMPConnector as L2, the lab engine talks to it as
vLLM 0.34's LMCacheMPConnector. verify.py passes its cycle (cold, repeat, S3 after clearing
the server's L1, cross-node, fallback, every answer the cold one), and a server killed under
an engine does what the real pair does: the engine keeps answering (recomputed, degraded
mode) and picks the server up again without an operator."""

from __future__ import annotations

import time

import pytest
from conftest import HOSTS, pyinfra, restore_needed, ssh
from lab_client import completion, long_prompt

MP_ENV = {"KVCEPH_LAB_ENGINE_MODE": "mp"}


@pytest.fixture(scope="module")
def mp_lab(converged, lab, request):
    run = pyinfra(env=MP_ENV)
    assert run.rc == 0, run.output[-6000:]
    yield run
    if restore_needed(request, lab):
        back = pyinfra()
        assert back.rc == 0, back.output[-6000:]


def _journal(host: str, unit: str, text: str, since: float) -> bool:
    cmd = f"journalctl -u {unit} --since @{int(since)} --no-pager -q | grep -c -F '{text}' || true"
    return int(ssh(host, cmd).stdout.strip() or 0) > 0


def test_verify_passes_in_mp_mode(mp_lab):
    assert "lmcache-server.service" in mp_lab.output
    for host in ("gpu1", "gpu2"):
        active = ssh(host, "systemctl is-active lmcache-server.service", check=False)
        assert active.stdout.strip() == "active", (host, active.stdout)
    run = pyinfra(deploy="verify.py", json_out=False, env=MP_ENV, timeout=600)
    assert run.rc == 0, run.output[-8000:]
    assert "kvceph verify FAILED" not in run.output


def test_server_killed_under_an_engine_recovers_without_operator(mp_lab):
    ip, since = HOSTS["gpu2"], time.time() - 1
    ssh("gpu2", "systemctl kill -s KILL lmcache-server.service")
    time.sleep(12)  # more than one heartbeat (10 s): the engine has noticed
    # the real pair recomputes while the server is gone: the request still answers
    assert completion(ip, long_prompt(1024), max_tokens=4)["choices"]
    assert _journal("gpu2", "vllm.service", "entering degraded mode", since)
    # systemd restarts the server (RestartSec 5 + the 25 s pause); the next heartbeat
    # registers the engine's KV cache again
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if _journal("gpu2", "vllm.service", "resuming normal operation", since):
            break
        time.sleep(3)
    else:
        pytest.fail("gpu2's engine did not resume normal operation within 90 s")
    assert _journal("gpu2", "vllm.service", "triggering recovery callback", since)
    assert completion(ip, long_prompt(1024), max_tokens=4)["choices"]
