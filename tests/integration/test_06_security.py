"""Serving-path security on the lab: the API key on every engine, vLLM's open routes closed by
kvceph's gate, no secret in any output, argv or journal, and a key change rolls every engine once.
"""

from __future__ import annotations

import json
import re

from conftest import HOSTS, INFERENCE, pyinfra, secrets, ssh
from lab_client import auth_headers, status

PROMPT = {"model": "Qwen/Qwen3-32B", "prompt": "security check", "max_tokens": 2}
CHAT = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hi"}]}


def _secret_values() -> dict[str, str]:
    keys = secrets()
    names = ("KVCEPH_S3_SECRET_KEY", "KVCEPH_VLLM_API_KEY", "KVCEPH_HF_TOKEN")
    return {n: keys[n].strip().strip("'\"") for n in names if keys.get(n)}


def _leaks(text: str) -> list[str]:
    return [name for name, value in _secret_values().items() if value in text]


def test_every_engine_requires_the_key(converged):
    assert "KVCEPH_VLLM_API_KEY" in _secret_values(), "the lab runs with an API key"
    key = auth_headers()
    wrong = {"Authorization": "Bearer not-the-key"}
    for host in INFERENCE:
        ip = HOSTS[host]
        assert status(ip, "POST", "/v1/completions", PROMPT) == 401, host
        assert status(ip, "POST", "/v1/completions", PROMPT, wrong) == 401, host
        assert status(ip, "GET", "/v1/models") == 401, host
        assert status(ip, "POST", "/v1/completions", PROMPT, key) == 200, host
        assert status(ip, "GET", "/v1/models", headers=key) == 200, host
        # Open in vLLM, closed by kvceph's gate: a generation route, tokenize, and from the
        # controller (not in kvceph_vllm_open_networks) /metrics and /health.
        for method, path, body in (
            ("POST", "/invocations", CHAT),
            ("POST", "/tokenize", PROMPT),
            ("GET", "/metrics", None),
            ("GET", "/health", None),
        ):
            assert status(ip, method, path, body) == 401, (host, path)
        assert status(ip, "GET", "/metrics", headers=key) == 200, host
        # On the host itself (127.0.0.1 is an open network) health and metrics need no key.
        local = ssh(
            host,
            "for p in health metrics v1/models; do "
            "curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:8000/$p; done",
        ).stdout.split()
        assert local == ["200", "200", "401"], (host, local)


def _engine_pids(host: str) -> list[str]:
    """Every process of the engine's unit (the main one and any children)."""
    # cgroup v1 or v2 inside the host: every process whose cgroup path ends in the unit.
    out = ssh(host, "grep -l '/vllm.service$' /proc/[0-9]*/cgroup 2>/dev/null || true").stdout
    return [line.split("/")[2] for line in out.split()]


def test_no_secret_in_argv_journal_or_world_readable_files(converged):
    for host in INFERENCE:
        pids = _engine_pids(host)
        assert pids, host
        for pid in pids:
            argv = ssh(host, f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout
            assert _leaks(argv) == [], (host, pid, argv)
        journal = ssh(host, "journalctl -u vllm.service --no-pager -o cat").stdout
        assert _leaks(journal) == [], host
        # The key reaches the engine through systemd's EnvironmentFile=, root-only on disk.
        mode = ssh(host, "stat -c '%a %U %G' /etc/kvceph/secrets.env").stdout.split()
        assert mode == ["600", "root", "root"], (host, mode)
        readable = ssh(host, "grep -rl -- VLLM_API_KEY /etc/kvceph/vllm.env || true").stdout
        assert readable.strip() == "", host


def test_no_secret_in_the_most_verbose_deploy_or_the_plan(converged):
    run = pyinfra("-vvv", "--debug", "--diff", json_out=False)
    assert run.rc == 0, run.output[-4000:]
    assert _leaks(run.output) == []
    dry = pyinfra("--dry", "-vvv", "--debug", "--diff", json_out=False)
    assert dry.rc == 0, dry.output[-4000:]
    assert _leaks(dry.output) == []
    plan = pyinfra("--dry")
    assert _leaks(json.dumps(plan.results)) == []


def _main_pids() -> dict[str, str]:
    return {
        h: ssh(h, "systemctl show -p MainPID --value vllm.service").stdout.strip()
        for h in INFERENCE
    }


def _restart_window(host: str) -> tuple[int, int]:
    out = ssh(
        host,
        "systemctl show vllm.service -p InactiveEnterTimestampMonotonic "
        "-p ExecMainStartTimestampMonotonic --value",
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_a_new_api_key_rolls_every_engine_once_one_at_a_time(converged):
    old = _secret_values()["KVCEPH_VLLM_API_KEY"]
    new = old + "-rotated"
    before = _main_pids()
    run = pyinfra(env={"KVCEPH_VLLM_API_KEY": new})
    assert run.rc == 0, run.output[-4000:]
    after = _main_pids()
    assert all(after[h] != before[h] for h in INFERENCE), (before, after)
    rolled = [h for name, h in run.changed() if name.endswith("Rolling restart of vllm.service")]
    assert sorted(rolled) == sorted(INFERENCE), rolled
    assert re.findall(r"restarts: .*differs", run.output), "no reason given for the restarts"
    assert _leaks(run.output) == [] and new not in run.output
    windows = sorted(_restart_window(h) for h in INFERENCE)
    for (_, started), (next_stopped, _) in zip(windows, windows[1:], strict=False):
        assert next_stopped > started, f"two engines were down at once: {windows}"
    for host in INFERENCE:
        ip = HOSTS[host]
        assert status(ip, "GET", "/v1/models", headers=auth_headers(new)) == 200, host
        assert status(ip, "GET", "/v1/models", headers=auth_headers(old)) == 401, host
    # A re-run with the same key changes nothing.
    again = pyinfra(env={"KVCEPH_VLLM_API_KEY": new})
    assert again.rc == 0 and again.changed() == [], again.changed()
    assert _main_pids() == after
    # Back to the lab's key (a second roll), converged again.
    assert pyinfra().rc == 0
    assert pyinfra().changed() == []
