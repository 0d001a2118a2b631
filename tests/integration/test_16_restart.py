"""Engines that come back (templates/vllm.service.j2, docs/design.md "Engine units"): the lab
engine's core process dies and the API server exits 0, as vLLM's does; systemd brings it back
(Restart=always). A crash loop stops at the unit's start limit, status.py says so, and the next
deploy brings the engine back."""

from __future__ import annotations

import time

from conftest import HOSTS, pyinfra, ssh
from lab_client import wait_health

# group_data/lab.py: kvceph_restart_delay 2 s, kvceph_health_timeout 60 s. The bound for
# serving again after the core died (docs/design.md): the API server's shutdown (<= 5 s) +
# RestartSec + the start (<= kvceph_health_timeout).
RESTART_DELAY, HEALTH_TIMEOUT = 2, 60
BOUND = 5 + RESTART_DELAY + HEALTH_TIMEOUT
# Holds the engine's port the way another program would: the engine cannot listen, exits 1.
SQUAT = "kvlab-port-squatter"
SQUATTER = (
    "import socket, time; s = socket.socket(socket.AF_INET6); "
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('::', 8000)); "
    "s.listen(); time.sleep(3600)"
)


def unit(host: str) -> dict[str, str]:
    out = ssh(host, "systemctl show -p MainPID -p ActiveState -p Result -p NRestarts vllm")
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_an_engine_whose_core_dies_serves_again_within_the_bound(converged):
    before = unit("gpu1")
    pid = before["MainPID"]
    core = ssh("gpu1", f"cat /proc/{pid}/task/{pid}/children").stdout.split()
    assert len(core) == 1, core  # the lab engine's EngineCore_DP0
    started = time.monotonic()
    ssh("gpu1", f"kill -9 {core[0]}")
    while unit("gpu1")["MainPID"] in (pid, "0") and time.monotonic() - started < BOUND:
        time.sleep(0.5)
    wait_health(HOSTS["gpu1"], timeout=BOUND - (time.monotonic() - started))
    took = time.monotonic() - started
    after = unit("gpu1")
    assert after["ActiveState"] == "active" and after["MainPID"] != pid
    # systemd restarted it (a clean exit 0: Restart=on-failure would have left it dead).
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
    journal = ssh("gpu1", "journalctl -u vllm --since=-2min --no-pager -q").stdout
    assert "Engine core proc EngineCore_DP0 died unexpectedly" in journal
    assert took < BOUND, took


def test_a_crash_loop_stops_at_the_start_limit_status_says_so_and_a_deploy_recovers(converged):
    ssh("gpu2", "systemctl stop vllm")
    ssh("gpu2", f'systemd-run --unit {SQUAT} python3 -c "{SQUATTER}"')
    try:
        # Earlier tests' starts of gpu2's engine inside the limit's window count against it
        # (test_16_monitoring stops and starts it): a clean count first, as kvceph's restarts do.
        ssh("gpu2", "systemctl reset-failed vllm", check=False)
        ssh("gpu2", "systemctl start vllm", check=False)
        # 5 starts of ~1.5 s, RestartSec 2 s apart: ~15 s; the limit is 5 x (60 + 2) s wide.
        # (systemd 252 keeps Result=exit-code there; newer ones say start-limit-hit.)
        deadline = time.monotonic() + 90
        while unit("gpu2")["ActiveState"] != "failed" and time.monotonic() < deadline:
            time.sleep(1)
        state = unit("gpu2")
        # Stopped at the limit: failed, after the restarts the burst allows (systemd counts
        # starts of the window, so the exact number depends on what started it before).
        assert state["ActiveState"] == "failed" and 3 <= int(state["NRestarts"]) <= 5, state
        time.sleep(2 * RESTART_DELAY)
        assert unit("gpu2")["ActiveState"] == "failed"  # no more starts: the loop stopped
        journal = ssh("gpu2", "journalctl -u vllm --since=-3min --no-pager -q").stdout
        assert "Start request repeated too quickly" in journal
        run = pyinfra("--limit", "gpu2", deploy="status.py", json_out=False, timeout=300)
        assert (
            "CRASH LOOP gpu2 vllm.service: systemd stopped restarting it at its start limit "
            f"({state['NRestarts']} restarts, last result " in run.output
        ), run.output[-3000:]
        assert (
            "fix: journalctl -u vllm.service on gpu2, then rerun the deploy (it resets the "
            "limit)" in run.output
        ), run.output[-3000:]
    finally:
        ssh("gpu2", f"systemctl stop {SQUAT}", check=False)
    # The fix is in place: the deploy restarts the failed unit despite its start limit.
    run = pyinfra("--limit", "gpu2")
    assert run.rc == 0, run.output[-4000:]
    wait_health(HOSTS["gpu2"], timeout=BOUND)
    assert unit("gpu2")["ActiveState"] == "active"
