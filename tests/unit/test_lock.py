"""The run lock: the real shell script under bash + flock, and the decision on a held lock."""

import subprocess
import time

import pytest

from deploys.access import lock


def _start(tmp_path, info):
    p = subprocess.Popen(
        ["bash", "-c", lock.lock_script(info, str(tmp_path))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return p, p.stdout.readline().strip()


def test_second_run_sees_the_holder_and_lock_frees_when_first_ends(tmp_path):
    first, status = _start(tmp_path, "owner=alice\ncontroller=ctl1\npid=11\nstarted=1000")
    assert status == "LOCKED"
    second = subprocess.run(
        [
            "bash",
            "-c",
            lock.lock_script("owner=bob\ncontroller=ctl2\npid=22\nstarted=2000", str(tmp_path)),
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert second.returncode == lock.HELD_EXIT
    head, _, rest = second.stdout.partition("\n")
    assert head == "HELD"
    holder = lock.Holder.parse(rest)
    assert (holder.owner, holder.controller, holder.pid) == ("alice", "ctl1", 11)
    assert holder.remote_pid == first.pid
    # The controller's connection closing (EOF on stdin) releases the lock.
    first.stdin.close()
    first.wait(timeout=10)
    third, status = _start(tmp_path, "owner=carol\ncontroller=c\npid=3\nstarted=3")
    assert status == "LOCKED"
    third.stdin.close()
    third.wait(timeout=10)


def test_break_script_frees_a_hung_holder(tmp_path):
    first, status = _start(tmp_path, "owner=a\ncontroller=c\npid=1\nstarted=1")
    assert status == "LOCKED"
    subprocess.run(["bash", "-c", lock.break_script(first.pid)], check=False, timeout=10)
    first.wait(timeout=10)
    second, status = _start(tmp_path, "owner=b\ncontroller=c\npid=2\nstarted=2")
    assert status == "LOCKED"
    second.stdin.close()
    second.wait(timeout=10)


def test_held_lock_message_names_the_holder():
    holder = lock.Holder("alice", "ctl1", 11, time.time() - 10, 99)
    with pytest.raises(lock.LockError) as err:
        lock.decide_on_held("ceph1", holder, stale_after=3600, break_lock=True)
    assert "alice on ctl1 (pid 11)" in str(err.value)
    assert "wait for that run to finish" in str(err.value)


def test_stale_lock_needs_the_flag():
    holder = lock.Holder("alice", "ctl1", 11, time.time() - 7200, 99)
    with pytest.raises(lock.LockError, match="kvceph_break_lock=true"):
        lock.decide_on_held("ceph1", holder, stale_after=3600, break_lock=False)
    assert lock.decide_on_held("ceph1", holder, stale_after=3600, break_lock=True) == "break"
