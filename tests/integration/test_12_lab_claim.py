"""A lab instance belongs to one run at a time (lab/claim.py): while this session holds the lab,
a second `make lab` or `lab.sh up` from outside it stops at once, in one line, and leaves the
running lab alone (the same host launchers, the same engine MainPIDs)."""

from __future__ import annotations

import os
import re
import subprocess
import time

from conftest import INFERENCE, LAB_DIR, REPO, ssh

# make's own closing line for a failed recipe (make[1]: under a parent make)
MAKE_ERROR = re.compile(r"make(\[\d+\])?: \*\*\* ")


def launcher_pids() -> dict[str, str]:
    return {p.parent.name: p.read_text().strip() for p in sorted(LAB_DIR.glob("hosts/*/pid"))}


def engine_pids() -> dict[str, str]:
    return {h: ssh(h, "systemctl show -p MainPID --value vllm").stdout.strip() for h in INFERENCE}


def test_second_run_on_a_busy_instance_stops_in_one_line(converged):
    before = (launcher_pids(), engine_pids())
    assert all(p not in ("", "0") for p in before[1].values()), before
    outside = {k: v for k, v in os.environ.items() if k != "KVCEPH_LAB_CLAIM"}
    for argv in (["make", "lab"], ["lab/lab.sh", "up"]):
        t0 = time.monotonic()
        out = subprocess.run(
            argv, cwd=REPO, env=outside, capture_output=True, text=True, timeout=120
        )
        took = time.monotonic() - t0
        assert out.returncode != 0, (argv, out.stdout[-2000:], out.stderr[-2000:])
        ours = [line for line in out.stderr.splitlines() if not MAKE_ERROR.match(line)]
        assert len(ours) == 1 and "is in use by" in ours[0], (argv, out.stderr)
        assert f"lab instance {os.environ.get('KVCEPH_LAB_INSTANCE') or 0} " in ours[0]
        assert "KVCEPH_LAB_INSTANCE=" in ours[0] and "make lab-down" in ours[0]
        assert took < 15, (argv, took)
    assert (launcher_pids(), engine_pids()) == before
