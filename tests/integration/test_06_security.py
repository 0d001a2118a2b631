"""Serving-path security on the lab: the API key on every engine, vLLM's open routes closed by
kvceph's gate, no secret in any output, argv or journal, and a key change rolls every engine once.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess

from conftest import HOSTS, INFERENCE, pyinfra, secrets, ssh, ssh_argv
from lab_client import auth_headers, status

PROMPT = {"model": "Qwen/Qwen3-32B", "prompt": "security check", "max_tokens": 2}
# The lab bridge's address: the controller, in kvceph_vllm_open_networks (group_data/lab.py).
CONTROLLER = HOSTS["ceph1"].rsplit(".", 1)[0] + ".1"
CHAT = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hi"}]}


def _secret_values() -> dict[str, str]:
    keys = secrets()
    names = (
        "KVCEPH_S3_ADMIN_SECRET_KEY",
        "KVCEPH_S3_SECRET_KEY_GPU",
        "KVCEPH_VLLM_API_KEY",
        "KVCEPH_HF_TOKEN",
    )
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
        # Open in vLLM, closed by kvceph's gate, also from an open network (the controller's):
        # a generation route and tokenize.
        for method, path, body in (("POST", "/invocations", CHAT), ("POST", "/tokenize", PROMPT)):
            assert status(ip, method, path, body) == 401, (host, path)
        assert status(ip, "GET", "/metrics", headers=key) == 200, host


def _codes(urls: list[str]) -> str:
    """A shell loop printing the HTTP status of each URL, space-separated."""
    return (
        f"for u in {' '.join(urls)}; do curl -s -o /dev/null -w '%{{http_code}} ' http://$u; done"
    )


def test_dual_stack_engines_open_health_and_metrics_to_the_ipv4_open_networks_only(converged):
    # group_data/lab.py binds the engines to `::` as vLLM does: one dual-stack socket, IPv4
    # clients seen as ::ffff:a.b.c.d; the open networks are IPv4 CIDRs (127.0.0.0/8, CONTROLLER).
    ready = [op for op in converged.ops() if op["name"].startswith("Readiness check | ")]
    assert ready and all(not op["error"] for op in ready), ready  # loopback got in, unkeyed
    local = ["127.0.0.1:8000/health", "127.0.0.1:8000/metrics", "[::1]:8000/metrics"]
    local.append("127.0.0.1:8000/v1/models")
    for host in INFERENCE:
        ip = HOSTS[host]
        # One IPv6 socket for both families; the controller among the open networks; on the host
        # itself IPv4 loopback (the deploy's own checks) and ::1 reach /health and /metrics.
        out = ssh(
            host,
            "ss -Hltn 'sport = :8000' | awk '{print $4}'; "
            "grep ^KVCEPH_OPEN_NETWORKS= /etc/kvceph/vllm.env; " + _codes(local),
        ).stdout.split()
        assert out[0] in ("*:8000", "[::]:8000"), (host, out)
        assert f"{CONTROLLER}/32" in out[1], (host, out)
        assert out[2:] == ["200", "200", "200", "401"], (host, out)
        # From the controller, an IPv4 open network: /health and /metrics without the key.
        assert status(ip, "GET", "/metrics") == 200, host
        assert status(ip, "GET", "/health") == 200, host
        assert status(ip, "GET", "/v1/models") == 401, host
    # gpu2 is outside the open networks (ceph1 and gaudi1 are in them: they run the routers,
    # whose health checks carry no key): it needs the key for both, on every engine (its own by
    # address too).
    urls = [f"{HOSTS[h]}:8000/{p}" for h in INFERENCE for p in ("health", "metrics")]
    assert ssh("gpu2", _codes(urls)).stdout.split() == ["401"] * len(urls)


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


# Run as `nobody` on a host while a deploy writes secrets: every file it can read in the places
# a write could pass through (SFTP's landing, temp files), printed once per version as
# "<path> <hex content>"; stops at EOF on stdin.
_WATCH = """
import os, select, sys, time
seen, roots = set(), sys.argv[1:]
while not (select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1)):
    for root in roots:
        for top, _, names in os.walk(root):
            for name in names:
                path = os.path.join(top, name)
                try:
                    st = os.stat(path)
                    key = (path, st.st_mtime_ns, st.st_size)
                    if key in seen or st.st_size > 1 << 20:
                        continue
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                seen.add(key)
                print(path, data.hex(), flush=True)
    time.sleep(0.002)
"""
_WATCHED = "/tmp /var/tmp /dev/shm /run/kvceph /var/lib/kvceph /etc/kvceph /home"


def _watch(host: str) -> subprocess.Popen:
    command = f"runuser -u nobody -- python3 -c {shlex.quote(_WATCH)} {_WATCHED}"
    return subprocess.Popen(
        [*ssh_argv(host), command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _seen(watcher: subprocess.Popen) -> dict[str, str]:
    """path -> the text of every version of it the watcher could read."""
    out, _ = watcher.communicate(input="", timeout=60)
    seen: dict[str, str] = {}
    for line in out.splitlines():
        path, _, data = line.partition(" ")
        seen[path] = seen.get(path, "") + bytes.fromhex(data).decode(errors="replace")
    return seen


def test_a_new_api_key_rolls_every_engine_once_one_at_a_time(converged):
    old = _secret_values()["KVCEPH_VLLM_API_KEY"]
    new = old + "-rotated"
    before = _main_pids()
    watchers = {h: _watch(h) for h in INFERENCE}
    run = pyinfra(env={"KVCEPH_VLLM_API_KEY": new})
    seen = {h: _seen(w) for h, w in watchers.items()}
    assert run.rc == 0, run.output[-4000:]
    # kvceph logs in as the lab's sudo user (inventories/lab.py): the new key passed through
    # its private upload directory only; no other user could read it at any moment.
    for host in INFERENCE:
        assert seen[host], f"{host}: the watcher read nothing: is it running?"
        leaked = sorted(p for p, text in seen[host].items() if new in text)
        assert leaked == [], (host, leaked)
        upload = ssh(host, "stat -c '%a %U' /var/lib/kvceph/upload; ls -A /var/lib/kvceph/upload")
        assert upload.stdout.split() == ["700", "kvdeploy"], (host, upload.stdout)
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
