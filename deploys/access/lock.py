"""One operator at a time: a run lock held on the Ceph admin host.

The lock is a ``flock`` held by a shell on the admin host, opened on an extra channel of
pyinfra's own SSH connection. It lives exactly as long as the controller's connection: when
the run ends (or the controller dies) the channel closes, the shell sees EOF and exits, and
the kernel drops the lock. Nothing is left to clean up, and taking it changes nothing that
pyinfra would count as a change. A holder whose connection hangs (half-open TCP) keeps the
lock; past ``kvceph_lock_stale_after`` seconds it can be broken with
``--data kvceph_break_lock=true``. Under sudo (``_sudo`` in the host's data, or ``--sudo``) the
shell runs through ``sudo`` like every operation (``deploys/access/sudo.py``): the lock file is
root's.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from dataclasses import dataclass

from deploys import paths
from deploys.access import sudo

HELD_EXIT = 75  # EX_TEMPFAIL

_held: dict[str, object] = {}  # admin host name -> open channel (keeps the lock alive)


class LockError(RuntimeError):
    """The lock is held by someone else, or could not be taken."""


@dataclass(frozen=True)
class Holder:
    owner: str
    controller: str
    pid: int
    started: float
    remote_pid: int

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        try:
            return cls(
                fields["owner"],
                fields["controller"],
                int(fields["pid"]),
                float(fields["started"]),
                int(fields.get("remote_pid", "0")),
            )
        except (KeyError, ValueError):
            return None

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        return f"{self.owner} on {self.controller} (pid {self.pid}) since {when}"

    def age(self, now: float | None = None) -> float:
        return (now or time.time()) - self.started


def me_as_holder() -> str:
    """The info lines this controller records when it takes the lock."""
    return "\n".join(
        [
            f"owner={getpass.getuser()}",
            f"controller={socket.gethostname()}",
            f"pid={os.getpid()}",
            f"started={time.time():.0f}",
        ]
    )


def lock_script(info: str, lock_dir: str = paths.LOCK_DIR) -> str:
    """Shell run on the admin host: take the lock or print the holder and exit 75."""
    lock_file, info_file = f"{lock_dir}/deploy.lock", f"{lock_dir}/deploy.lock.info"
    # The info only holds values this module generated (user, hostname, pid, time), and is
    # written after the lock is held, so a reader never sees a half-written holder.
    return (
        f"mkdir -p {lock_dir} && exec 9>>{lock_file} && "
        f"if ! flock -n 9; then echo HELD; cat {info_file} 2>/dev/null; exit {HELD_EXIT}; fi; "
        f"printf '%s\\nremote_pid=%s\\n' '{info}' $$ > {info_file}.tmp && "
        f"mv -f {info_file}.tmp {info_file} && echo LOCKED && cat >/dev/null"
    )


def break_script(remote_pid: int) -> str:
    """Shell that ends a stale holder's shell (and its ``cat``) so the kernel drops the lock."""
    return f"pkill -TERM -P {remote_pid} cat; kill -TERM {remote_pid} 2>/dev/null; sleep 0.5"


def decide_on_held(
    host: str, holder: Holder | None, stale_after: int, break_lock: bool, now: float | None = None
) -> str:
    """'break' when a stale lock may be broken; otherwise raise LockError with the reason."""
    if holder is None:
        raise LockError(
            f"{host}: {paths.LOCK_FILE} is held but names no holder; "
            "fix: wait for the other run, or check the admin host"
        )
    age = holder.age(now)
    if break_lock and age > stale_after:
        return "break"
    hint = (
        f"it is {age:.0f}s old (stale after {stale_after}s): "
        "break it with --data kvceph_break_lock=true"
        if age > stale_after
        else "wait for that run to finish"
    )
    raise LockError(f"{host}: another kvceph run holds the lock: {holder.describe()}; fix: {hint}")


def acquire(host, stale_after: int, break_lock: bool, timeout: float = 15.0) -> str:
    """Take the run lock on ``host`` (a connected pyinfra SSH host). Returns a status line."""
    if host.name in _held:
        return "held"
    client = getattr(host.connector, "client", None)
    if client is None:
        return f"{host.name}: connector {type(host.connector).__name__} has no SSH channel: no lock"
    for attempt in (1, 2):
        chan = client.get_transport().open_session()
        chan.settimeout(timeout)
        chan.exec_command(sudo.shell_line(host.state, host, lock_script(me_as_holder())))
        first, rest, err = _read_status(chan, timeout)
        if first == "LOCKED":
            _held[host.name] = chan
            return "taken"
        rc = chan.recv_exit_status() if chan.exit_status_ready() else None
        chan.close()
        if first != "HELD":
            raise LockError(f"{host.name}: could not take {paths.LOCK_FILE}: {_failure(rc, err)}")
        holder = Holder.parse(rest)
        decide_on_held(host.name, holder, stale_after, break_lock)
        if attempt == 2:
            break
        ok, _ = host.run_shell_command(
            break_script(holder.remote_pid), _timeout=30, **sudo.arguments(host.state, host)
        )
        if not ok:
            raise LockError(f"{host.name}: could not break the stale lock of {holder.describe()}")
    raise LockError(f"{host.name}: the lock is still held after breaking it; fix: check by hand")


def _read_status(chan, timeout: float) -> tuple[str, str, str]:
    """First line (LOCKED / HELD), for HELD the holder info that follows, and stderr (what
    sudo says when it refuses: ``sudo: a password is required``)."""
    buf, err = b"", b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if b"LOCKED\n" in buf.replace(b"\r", b""):  # sudo's use_pty may add a \r
            return "LOCKED", "", ""
        if chan.recv_stderr_ready():
            err += chan.recv_stderr(4096)
            continue
        if chan.exit_status_ready() and not chan.recv_ready():
            break
        if chan.recv_ready():
            buf += chan.recv(4096)
        else:
            time.sleep(0.05)
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(4096)
    text = buf.decode(errors="replace").replace("\r", "")
    first, _, rest = text.partition("\n")
    return first.strip(), rest, err.decode(errors="replace")


def _failure(rc: int | None, err: str) -> str:
    """What failed on the lock channel, from its exit status and stderr."""
    said = sudo.first_line(err)
    if rc is None:
        return f"no answer in time (stderr: {said})"
    if "password is required" in said or "interactive authentication" in said:
        return (
            f"{said} (exit {rc}); fix: passwordless sudo for the login user (sudoers NOPASSWD), "
            "or log in as root"
        )
    return f"exit {rc}: {said}"


def release_all() -> None:
    """Close the lock channels (the run is over)."""
    for name in list(_held):
        chan = _held.pop(name)
        try:
            chan.close()
        except OSError:
            pass
