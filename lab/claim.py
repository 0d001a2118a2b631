#!/usr/bin/env python3
"""A lab instance belongs to one run at a time: the claim file ``$KVCEPH_LAB_DIR/claim``.

The claim is held by the top-level command (``make lab``, ``make test``, ``lab.sh up`` run by
hand, a pytest session) for as long as it runs; everything it starts inherits
``KVCEPH_LAB_CLAIM`` (the claim's token) and passes: ``make lab``'s sub-make, ``make test``'s
Pacific pytest session (its cephadm session claims the next instance with ``run``), the
``lab.sh stop/start/replace`` the tests run. A second run on a
busy instance stops at once with one line naming the instance, the running command and the fix.
A claim whose process is gone, or whose PID now belongs to another program (the start time in
``/proc/PID/stat`` differs, or the machine rebooted), is stale: the next run takes it over.

Standard library only: lab.sh and the Makefile run it with the system python3, before any venv.

usage: claim.py run WHAT -- COMMAND...   hold the claim while COMMAND runs (nested: just run it)
       claim.py show                       the current claim, if any (exit 1 when free)
       claim.py busy                       the busy line and exit 75 when another live run
                                           holds it (the Makefile stops with it, no make noise)
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "KVCEPH_LAB_CLAIM"
BUSY_RC = 75  # EX_TEMPFAIL: the instance is busy, nothing was done


def instance() -> int:
    """KVCEPH_LAB_INSTANCE as lab.sh reads it (0 when unset)."""
    return int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)


def lab_dir() -> Path:
    """The instance's state directory, the same rule as lab.sh and the Makefile."""
    n = instance()
    return Path(os.environ.get("KVCEPH_LAB_DIR") or f"/var/lib/kvceph-lab{n or ''}")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "-"


def start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return stat.rsplit(")", 1)[1].split()[19]


def token_of(pid: int) -> str:
    """The identity of a live process that survives PID reuse: pid, start time, boot."""
    return f"{pid}:{start_ticks(pid)}:{_boot_id()}"


@dataclass
class Claim:
    """What the claim file says: whose it is, what runs, since when (UTC)."""

    token: str
    what: str
    since: str

    @property
    def pid(self) -> int:
        return int(self.token.split(":", 1)[0])

    def stale_reason(self) -> str | None:
        """None while the claiming process lives, else why the claim no longer holds."""
        pid, ticks, boot = (self.token.split(":") + ["", "", ""])[:3]
        if boot != _boot_id():
            return "the machine rebooted since"
        now = start_ticks(int(pid)) if pid.isdigit() else None
        if now is None:
            return f"pid {pid} is gone"
        if now != ticks:
            return f"pid {pid} is now another program"
        return None


def read(path: Path) -> Claim | None:
    """The claim in ``path``, or None when there is none (or it is unreadable: no claim)."""
    try:
        fields = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    except OSError:
        return None
    if "token" not in fields:
        return None
    return Claim(fields["token"], fields.get("what", "?"), fields.get("since", "?"))


def busy_message(claim: Claim, n: int, lab: Path) -> str:
    """The one line a second run prints: the instance, what runs there, the fix."""
    other = n + 1 if n < 99 else n - 1
    return (
        f"[lab] ERROR: lab instance {n} ({lab}) is in use by `{claim.what}` "
        f"(pid {claim.pid}, since {claim.since}); run beside it with "
        f"KVCEPH_LAB_INSTANCE={other}, or end that run (kill {claim.pid}) and `make lab-down`"
    )


def busy_line(lab: Path | None = None) -> str | None:
    """The one line of :func:`busy_message` when a live run that is not ours holds the
    instance, else None (free, ours, or stale: ``run`` takes a stale claim over)."""
    lab = lab or lab_dir()
    current = read(lab / "claim")
    if current is None or current.token == os.environ.get(ENV) or current.stale_reason():
        return None
    return busy_message(current, instance(), lab)


class Busy(Exception):
    """The instance is claimed by a live run that is not ours."""


def acquire(what: str, pid: int | None = None, lab: Path | None = None) -> tuple[str, bool]:
    """Claim the instance for ``pid`` (default: this process); returns (token, newly claimed).

    Already ours (``KVCEPH_LAB_CLAIM`` is the file's token): nothing changes. A stale claim is
    taken over with one line on stderr. Raises :class:`Busy` with the one-line message.
    """
    lab = lab or lab_dir()
    path = lab / "claim"
    lab.mkdir(parents=True, exist_ok=True)
    with open(lab / "claim.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # check and write as one step against a racing run
        current = read(path)
        if current is not None and current.token == os.environ.get(ENV):
            return current.token, False
        if current is not None:
            reason = current.stale_reason()
            if reason is None:
                raise Busy(busy_message(current, instance(), lab))
            print(
                f"[lab] instance {instance()}: taking over the stale claim of `{current.what}` "
                f"(since {current.since}: {reason})",
                file=sys.stderr,
            )
        token = token_of(pid or os.getpid())
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"token={token}\nwhat={what}\nsince={since}\n")
        tmp.replace(path)
        return token, True


def release(token: str, lab: Path | None = None) -> None:
    """Remove the claim if it is still ``token``'s (a purge may have removed the dir)."""
    lab = lab or lab_dir()
    try:
        with open(lab / "claim.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = read(lab / "claim")
            if current is not None and current.token == token:
                (lab / "claim").unlink()
    except FileNotFoundError:
        pass


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(what: str, argv: list[str]) -> int:
    """Run ``argv`` holding the claim; its exit status (BUSY_RC when the instance is busy)."""
    try:
        token, mine = acquire(what)
    except Busy as busy:
        print(busy, file=sys.stderr)
        return BUSY_RC
    if not mine:
        os.execvp(argv[0], argv)
    env = {**os.environ, ENV: token}
    # Ctrl-C reaches the child through the terminal; we wait for it, then release.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen(argv, env=env, preexec_fn=_default_sigint)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    try:
        rc = child.wait()
    finally:
        release(token)
    return rc if rc >= 0 else 128 - rc


def main(args: list[str]) -> int:
    if len(args) >= 4 and args[0] == "run" and args[2] == "--":
        return run(args[1], args[3:])
    if args == ["show"]:
        current = read(lab_dir() / "claim")
        if current is None:
            return 1
        state = current.stale_reason() or "live"
        print(f"{current.what} (pid {current.pid}, since {current.since}): {state}")
        return 0
    if args == ["busy"]:
        line = busy_line()
        if line is None:
            return 0
        print(line)
        return BUSY_RC
    print(__doc__.split("usage: ", 1)[1].rstrip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
