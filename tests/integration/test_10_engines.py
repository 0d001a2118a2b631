"""Several engines per host and restarts in batches, on the lab: gpu1 runs engine-a (emulated
devices 0,1, port 8000) and engine-b (2,3, port 8001) through KVCEPH_LAB_ENGINES
(inventories/lab.py); the other lab tests keep one vllm.service per host, so this module
leaves the lab as they expect it (the last test migrates back)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import HOSTS, MODEL_ARGUMENT, REPORTS, lab_sh, pyinfra, ssh
from lab_client import (
    StreamLoad,
    auth_headers,
    completion,
    external_hits,
    long_prompt,
    wait_health,
)

LEDGER = "/dev/shm/kvceph-lab-devices"  # the lab engine's device memory (group_data/lab.py)
AB = {"KVCEPH_LAB_ENGINES": "a,b"}
A = {"KVCEPH_LAB_ENGINES": "a"}
# Every engine's LMCache file changes: all four engines must restart.
CHANGE = ("--data", "kvceph_lmcache_blocking_timeout_secs=107")
ENGINES = {
    "gpu1/engine-a": ("gpu1", "vllm-engine-a.service", 8000),
    "gpu1/engine-b": ("gpu1", "vllm-engine-b.service", 8001),
    "gpu2": ("gpu2", "vllm.service", 8000),
    "gaudi1": ("gaudi1", "vllm.service", 8000),
}


def main_pid(name: str) -> str:
    host, unit, _ = ENGINES[name]
    return ssh(host, f"systemctl show -p MainPID --value {unit}").stdout.strip()


def main_pids() -> dict[str, str]:
    return {name: main_pid(name) for name in ENGINES}


def healthy(name: str) -> bool:
    import urllib.request

    host, _, port = ENGINES[name]
    req = urllib.request.Request(f"http://{HOSTS[host]}:{port}/health", headers=auth_headers())
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def window(name: str) -> tuple[int, int]:
    """(old engine stopped, new one serving), kernel-monotonic µs (one kernel for all hosts):
    systemd's InactiveEnterTimestamp, and the engine's "Application startup complete." line."""
    host, unit, _ = ENGINES[name]
    out = ssh(host, f"systemctl show {unit} -p InactiveEnterTimestampMonotonic -p MainPID").stdout
    # systemctl prints properties in its own order, not the order asked: read them by name.
    values = dict(line.split("=", 1) for line in out.split())
    lines = ssh(host, f"journalctl _PID={values['MainPID']} -o json --no-pager").stdout
    serving = [
        int(entry["__MONOTONIC_TIMESTAMP"])
        for entry in map(json.loads, lines.splitlines())
        if "Application startup complete" in str(entry.get("MESSAGE"))
    ]
    return int(values["InactiveEnterTimestampMonotonic"]), serving[-1]


def batches(output: str) -> dict[int, set[str]]:
    """Batch number -> engines, from the roll's own lines ("restart batch 1: gpu1 vllm...")."""
    found: dict[int, set[str]] = {}
    by_unit = {(h, u): n for n, (h, u, _) in ENGINES.items()}
    for number, host, unit in re.findall(
        r"restart batch (\d+): (\S+) (\S+\.service)$", output, re.M
    ):
        found.setdefault(int(number), set()).add(by_unit[(host, unit)])
    return found


@pytest.fixture(scope="module")
def two_engines(lab):
    """Converge with two engines on gpu1 (from blank on a fresh lab)."""
    run = pyinfra(env=AB)
    assert run.rc == 0, run.output[-6000:]
    return run


def test_converge_with_two_engines_then_no_change(two_engines):
    units = ssh("gpu1", "systemctl is-active vllm-engine-a.service vllm-engine-b.service")
    assert units.stdout.split() == ["active", "active"]
    # Today's vllm.service is not on gpu1: two engines own its devices now.
    assert ssh("gpu1", "test -e /etc/systemd/system/vllm.service", check=False).returncode == 1
    for name, devices in (("gpu1/engine-a", "0,1"), ("gpu1/engine-b", "2,3")):
        environ = ssh("gpu1", f"tr '\\0' '\\n' < /proc/{main_pid(name)}/environ").stdout
        assert f"CUDA_VISIBLE_DEVICES={devices}" in environ
        assert healthy(name)
    again = pyinfra(env=AB)
    assert again.rc == 0 and again.changed() == [], again.changed()


def test_verify_proves_reuse_inside_gpu1_and_across_hosts(two_engines):
    run = pyinfra(deploy="verify.py", json_out=False, env=AB, timeout=600)
    assert run.rc == 0, run.output[-5000:]
    # verify.py's restarts drain first, like the deploy's (deploys/engine/drain.py).
    assert re.search(r"kvceph verify: drain gpu1 vllm-engine-a.service: drained in", run.output)
    report = json.loads((REPORTS / "verify-latest.json").read_text())
    verdicts = {(s["host"], s["step"]): s for s in report["steps"]}
    assert verdicts[("gpu1/engine-a", "warm")]["verdict"] == "pass"
    # engine-b, on the same host, and gpu2 load the chunks engine-a wrote.
    for key in (("gpu1/engine-b", "cross-engine"), ("gpu2", "cross-node")):
        assert verdicts[key]["verdict"] == "pass", verdicts[key]
        assert verdicts[key]["hit_tokens"] > 0


def test_bad_engine_lists_stop_in_one_line_before_any_host_is_touched(two_engines):
    before = main_pids()
    bad = {
        "overlapping devices": (
            [
                {"name": "a", "devices": [0, 1], "port": 8000},
                {"name": "b", "devices": [1, 2], "port": 8001},
            ],
            "gpu1: kvceph_engines = 'b': device 1 also belongs to engine a",
        ),
        "duplicate ports": (
            [
                {"name": "a", "devices": [0, 1], "port": 8000},
                {"name": "b", "devices": [2, 3], "port": 8000},
            ],
            "gpu1: kvceph_engines = 8000: port used by engines a and b",
        ),
        "TP above devices": (
            [{"name": "a", "devices": [0], "port": 8000}],
            "gpu1: kvceph_engines = 'a': kvceph_tensor_parallel_size 2 exceeds its 1 device(s)",
        ),
    }
    for what, (engines, line) in bad.items():
        run = pyinfra(
            "--data",
            "kvceph_accelerator_count=4",
            "--data",
            f"kvceph_engines={json.dumps(engines)}",
            json_out=False,
            env=AB,
        )
        assert run.rc != 0, what
        errors = [x for x in run.output.splitlines() if "kvceph: gpu1: kvceph_engines" in x]
        assert len(errors) == 1 and line in errors[0], (what, run.output[-2000:])
        assert "fix: " in errors[0]
    assert main_pids() == before


def test_removing_an_engine_stops_and_removes_exactly_that_unit(two_engines):
    before = main_pids()
    plan = pyinfra("--dry", env=A)
    assert (
        "vLLM service | Remove engine vllm-engine-b.service (no longer in kvceph_engines)",
        "gpu1",
    ) in plan.planned(), plan.planned()
    run = pyinfra(env=A)
    assert run.rc == 0, run.output[-4000:]
    assert ssh("gpu1", "systemctl is-active vllm-engine-b.service", check=False).stdout.strip() in (
        "inactive",
        "unknown",
    )
    left = ssh(
        "gpu1",
        "ls /etc/systemd/system/vllm-engine-b.service /etc/kvceph/vllm-engine-b.env",
        check=False,
    )
    assert left.returncode != 0 and left.stdout == ""
    assert (
        "enabled"
        not in ssh("gpu1", "systemctl is-enabled vllm-engine-b.service", check=False).stdout
    )
    after = main_pids()
    for name in ("gpu1/engine-a", "gpu2", "gaudi1"):
        assert after[name] == before[name], name
    assert not healthy("gpu1/engine-b")
    assert pyinfra(env=A).changed() == []
    # Back: engine-b is added again and starts; nothing else restarts.
    back = pyinfra(env=AB)
    assert back.rc == 0, back.output[-4000:]
    restarted = {h for n, h in back.changed() if "Rolling restart" in n}
    assert restarted == {"gpu1"}
    assert {k: v for k, v in main_pids().items() if k != "gpu1/engine-b"} == {
        k: v for k, v in after.items() if k != "gpu1/engine-b"
    }


def test_batch_of_two_restarts_two_engines_at_a_time(two_engines):
    before = main_pids()
    # A steady stream of streamed requests to every engine while they roll two at a time.
    with StreamLoad({n: (HOSTS[h], port) for n, (h, _, port) in ENGINES.items()}) as load:
        run = pyinfra(*CHANGE, "--data", "kvceph_restart_batch=2", env=AB)
    assert run.rc == 0, run.output[-4000:]
    assert load.accepted() and load.cut() == [], load.cut()[:5]
    refused = load.refused()
    assert refused and {(r["status"], r["retry_after"]) for r in refused} == {(503, "5")}
    # Each engine's turn: its drain (the open requests' remaining 0.2 s) and its restart.
    turns = re.findall(r"healthy \(drain ([\d.]+) s, restart ([\d.]+) s\)", run.output)
    assert len(turns) == len(ENGINES) and all(float(d) < 5 for d, _ in turns), turns
    after = main_pids()
    assert all(after[n] != before[n] for n in ENGINES), (before, after)
    found = batches(run.output)
    assert sorted(e for b in found.values() for e in b) == sorted(ENGINES), found
    assert max(len(b) for b in found.values()) == 2 and len(found[1]) == 2, found
    windows = {n: window(n) for n in ENGINES}
    # Inside a batch the windows overlap; the next batch stops only once the last one serves.
    first = [windows[n] for n in found[1]]
    assert max(stop for stop, _ in first) < min(start for _, start in first), first
    for k in sorted(found)[1:]:
        prev_started = max(windows[n][1] for n in found[k - 1])
        assert min(windows[n][0] for n in found[k]) > prev_started, (found, windows)


def test_a_failing_engine_stops_the_roll(two_engines):
    # A stray process holding device 0's memory: engine-a fails to start, like vLLM would.
    holder = ssh("gpu1", "nohup sleep 600 >/dev/null 2>&1 & echo $!").stdout.strip()
    ssh(
        "gpu1",
        f"mkdir -p {LEDGER} && echo 0.9 > {LEDGER}/0.{holder}",
    )
    before = main_pids()
    try:
        run = pyinfra(
            "--data",
            "kvceph_lmcache_blocking_timeout_secs=109",
            "--data",
            "kvceph_restart_batch=2",
            "--data",
            "kvceph_health_timeout=15",
            json_out=False,
            env=AB,
        )
    finally:
        ssh("gpu1", f"kill {holder}; rm -f {LEDGER}/0.{holder}", check=False)
    assert run.rc != 0
    assert re.search(r"restart batch \d+: gpu1 vllm-engine-a.service FAILED", run.output), (
        run.output[-3000:]
    )
    # An engine still waiting in the same operation says why it does not restart (gpu1's own
    # later engines are not tried at all: pyinfra drops a failed host from later operations).
    refused = re.findall(
        r"not restarting (\S+): the rolling restart stopped at (.*?) \(", run.output
    )
    assert all(at == "gpu1 vllm-engine-a.service" for _, at in refused), refused
    after = main_pids()
    found = batches(run.output)
    failed_batch = next(k for k, b in found.items() if "gpu1/engine-a" in b)
    assert max(found) == failed_batch, f"a batch started after the failure: {found}"
    # engine-b's operation comes after engine-a's: never restarted, still serving.
    assert after["gpu1/engine-b"] == before["gpu1/engine-b"]
    untouched = [n for n in ENGINES if after[n] == before[n]]
    assert untouched and all(healthy(n) for n in untouched if n != "gpu1/engine-a")
    resumed = pyinfra("--data", "kvceph_lmcache_blocking_timeout_secs=109", env=AB)
    assert resumed.rc == 0, resumed.output[-4000:]


def test_replaced_two_engine_host_pulls_the_model_starts_both_and_hits_the_fleets_chunks(
    two_engines,
):
    """Node replacement of a host with two engines (the previous test left timeout 109)."""
    keep = ("--data", "kvceph_lmcache_blocking_timeout_secs=109")
    assert pyinfra(*keep, env=AB).changed() == []
    prompt = long_prompt(1024)  # 4 full chunks, written by gpu2 before gpu1 is replaced
    completion(HOSTS["gpu2"], prompt)
    others = {n: main_pid(n) for n in ("gpu2", "gaudi1")}

    lab_sh("replace", "gpu1")  # blank disk, new SSH host key
    assert ssh("gpu1", "ls -d /opt/kvceph/venv* /opt/kvceph/engines", check=False).returncode != 0
    run = pyinfra(*keep, env=AB)
    assert run.rc == 0, run.output[-6000:]
    assert {h for _, h in run.changed()} == {"gpu1"}, run.changed()
    assert {n: main_pid(n) for n in others} == others
    # The model came from the mirror (nothing else is reachable), one staged copy for both.
    assert (
        ssh("gpu1", f"test -f {MODEL_ARGUMENT}/kvceph-manifest.json", check=False).returncode == 0
    )
    for name, devices in (("gpu1/engine-a", "0,1"), ("gpu1/engine-b", "2,3")):
        _, unit, port = ENGINES[name]
        assert (
            f"serve {MODEL_ARGUMENT} "
            in ssh("gpu1", f"systemctl show -p ExecStart --value {unit}").stdout
        )
        environ = ssh("gpu1", f"tr '\\0' '\\n' < /proc/{main_pid(name)}/environ").stdout
        assert f"CUDA_VISIBLE_DEVICES={devices}" in environ and "HF_HUB_OFFLINE=1" in environ
        wait_health(HOSTS["gpu1"], port=port)
        hits = external_hits(HOSTS["gpu1"], port=port)
        completion(HOSTS["gpu1"], prompt, port=port)
        assert external_hits(HOSTS["gpu1"], port=port) - hits >= 1023, f"{name}: no reuse"
    assert pyinfra(*keep, env=AB).changed() == []


def test_back_to_one_vllm_service_per_host(two_engines):
    """The other lab tests' layout; a migration too (two engines -> today's single unit)."""
    run = pyinfra()
    assert run.rc == 0, run.output[-4000:]
    units = ssh("gpu1", "ls /etc/systemd/system/ | grep '^vllm'").stdout.split()
    assert units == ["vllm.service"]
    assert ssh("gpu1", "systemctl is-active vllm.service").stdout.strip() == "active"
    assert pyinfra().changed() == []
