"""Where a run's time goes: every SSH connect and command, per host, on one time line.

    python bench/trace.py OUT.json -- -y inventories/lab.py deploy.py

Runs pyinfra as the CLI does, with its SSH connector wrapped to note each connection and
command (host, start and duration in seconds from the interpreter's start, the command's first
line). Prints the time line and, per host, the time spent waiting on its commands; writes the
rows to OUT.json. A profile, not a benchmark: one run, for reading the shape (what runs
serially, what waits for what), not for figures (bench/run.py).
"""

from __future__ import annotations

import time

T0 = time.monotonic()  # before pyinfra is imported: its import is part of a run's cost

import json  # noqa: E402
import sys  # noqa: E402

from pyinfra.connectors import ssh  # noqa: E402


def _wrap(rows: list, name: str, label) -> None:
    original = getattr(ssh.SSHConnector, name)

    def wrapper(self, *args, **kwargs):
        start = time.monotonic()
        try:
            return original(self, *args, **kwargs)
        finally:
            end = time.monotonic()
            rows.append([self.host.name, round(start - T0, 3), round(end - start, 3), label(args)])

    setattr(ssh.SSHConnector, name, wrapper)


def _first_line(args) -> str:
    command = args[0]
    raw = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
    return raw.splitlines()[0][:110] if raw else ""


def main() -> None:
    out = sys.argv[1]
    sys.argv = ["pyinfra", *sys.argv[sys.argv.index("--") + 1 :]]
    rows: list = []
    _wrap(rows, "connect", lambda args: "<connect>")
    _wrap(rows, "run_shell_command", _first_line)
    from pyinfra_cli.main import main as pyinfra_main

    try:
        pyinfra_main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    rows.sort(key=lambda r: r[1])
    rows.append(["-", round(time.monotonic() - T0, 3), 0, "<end of run>"])
    with open(out, "w") as f:
        json.dump(rows, f, indent=0)
    for host, start, secs, what in rows:
        print(f"{host:8} {start:7.2f} {secs:6.2f}  {what}", file=sys.stderr)
    busy: dict[str, float] = {}
    for host, _, secs, _ in rows:
        busy[host] = busy.get(host, 0.0) + secs
    for host, secs in sorted(busy.items()):
        if host != "-":
            count = sum(1 for r in rows if r[0] == host)
            print(
                f"{host}: {count} connects/commands, {secs:.2f} s waiting on them", file=sys.stderr
            )
    sys.exit(code)


if __name__ == "__main__":
    main()
