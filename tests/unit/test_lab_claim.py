"""The lab instance claim (lab/claim.py): one run per instance, stale claims taken over.

Real processes and the real entry points (claim.py, lab.sh, make) on a throwaway state dir:
a refused command stops before it touches anything, so no lab is needed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLAIM = ROOT / "lab" / "claim.py"
_spec = importlib.util.spec_from_file_location("kvceph_lab_claim", CLAIM)
claim = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = claim  # dataclasses look their module up there
_spec.loader.exec_module(claim)


@pytest.fixture
def env(tmp_path):
    """An environment for instance 4 with its state dir under tmp_path, outside any claim;
    `make test`'s other two instances' dirs there too (never a real lab's claim)."""
    drop = {"KVCEPH_LAB_CLAIM", "CEPHADM_LAB_INSTANCE", "PACIFIC2_LAB_INSTANCE"}
    e = {k: v for k, v in os.environ.items() if k not in drop}
    e.update(KVCEPH_LAB_INSTANCE="4", KVCEPH_LAB_DIR=str(tmp_path / "lab"))
    e.update(CEPHADM_LAB_DIR=str(tmp_path / "lab5"), PACIFIC2_LAB_DIR=str(tmp_path / "lab6"))
    return e


# make's own closing line for a failed recipe (make[1]: under a parent make)
MAKE_ERROR = re.compile(r"make(\[\d+\])?: \*\*\* ")


def holder(env, what="make test", seconds=60):
    """A run holding the claim (claim.py run WHAT -- sleep), once its claim is written."""
    proc = subprocess.Popen(
        [sys.executable, str(CLAIM), "run", what, "--", "sleep", str(seconds)], env=env
    )
    claim = Path(env["KVCEPH_LAB_DIR"]) / "claim"
    deadline = time.monotonic() + 10
    while not claim.exists():
        assert time.monotonic() < deadline, "no claim written"
        time.sleep(0.05)
    return proc


def claimed(env, *argv, timeout=30):
    return subprocess.run(
        [sys.executable, str(CLAIM), "run", "second", "--", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_busy_instance_refused_in_one_line(env, tmp_path):
    first = holder(env)
    try:
        marker = tmp_path / "ran"
        t0 = time.monotonic()
        second = claimed(env, "touch", str(marker))
        assert second.returncode == 75
        assert time.monotonic() - t0 < 5
        assert not marker.exists()
        (line,) = second.stderr.splitlines()
        assert "lab instance 4" in line and "`make test`" in line and f"pid {first.pid}" in line
        assert "KVCEPH_LAB_INSTANCE=5" in line and "`make lab-down`" in line
        assert first.poll() is None  # the first run is untouched
    finally:
        first.kill()
        first.wait()


def test_child_of_the_claiming_run_passes(env, tmp_path):
    marker = tmp_path / "nested"
    # the inner claim.py runs inside the outer one's claim: it just runs its command
    inner = f"{sys.executable} {CLAIM} run inner -- touch {marker}"
    out = claimed(env, "sh", "-c", inner)
    assert out.returncode == 0, out.stderr
    assert marker.exists()
    assert not (tmp_path / "lab" / "claim").exists()  # released when the run ended


def test_exit_status_is_the_commands(env):
    assert claimed(env, "sh", "-c", "exit 3").returncode == 3


def write_claim(env, token):
    lab = Path(env["KVCEPH_LAB_DIR"])
    lab.mkdir(parents=True, exist_ok=True)
    (lab / "claim").write_text(f"token={token}\nwhat=make lab\nsince=2026-12-01 19:00:00 UTC\n")


def test_claim_of_a_dead_process_is_taken_over(env, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_claim(env, f"{dead.pid}:1:{claim._boot_id()}")
    out = claimed(env, "touch", str(tmp_path / "ran"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ran").exists()
    (line,) = out.stderr.splitlines()
    assert "taking over the stale claim of `make lab`" in line and "is gone" in line


def test_claim_of_a_reused_pid_is_taken_over(env, tmp_path):
    """The PID lives, but it is another program than the one that claimed (start time differs)."""
    write_claim(env, f"{os.getpid()}:1:{claim._boot_id()}")
    out = claimed(env, "touch", str(tmp_path / "ran"))
    assert out.returncode == 0, out.stderr
    assert "is now another program" in out.stderr


def test_claim_from_before_a_reboot_is_taken_over(env, tmp_path):
    write_claim(env, f"{os.getpid()}:0:00000000")
    out = claimed(env, "true")
    assert out.returncode == 0 and "rebooted" in out.stderr


def test_lab_sh_and_make_refused_on_a_busy_instance(env):
    """`lab.sh up` and `make lab` stop at once, before any host or package step."""
    first = holder(env, "make test")
    try:
        for argv in (["lab/lab.sh", "up"], ["make", "-s", "lab"], ["make", "-s", "test"]):
            t0 = time.monotonic()
            out = subprocess.run(
                argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
            )
            assert out.returncode != 0, argv
            assert time.monotonic() - t0 < 10, argv
            ours = [x for x in out.stderr.splitlines() if not MAKE_ERROR.match(x)]
            assert len(ours) == 1 and "in use by `make test`" in ours[0], (argv, out.stderr)
            assert out.stdout == "", argv
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()
