"""Whether the built-in lab (lab/lab.sh) is up, read from the files lab.sh leaves on the controller.

Standard library only: the Makefile runs it with the system python3 (``python3 -m deploys.lab
LAB_DIR INSTANCE``: the one line, exit 1, when the lab is down), inventories/lab.py under pyinfra.
A lab with none of its hosts running is down: pyinfra would otherwise try every host and print
one paramiko traceback per host. A lab with some hosts stopped is up (the tests stop hosts on
purpose): pyinfra reports each lost host itself.
"""

from __future__ import annotations

import sys
from pathlib import Path


def running_hosts(lab_dir: str | Path) -> list[str]:
    """The lab hosts whose nspawn launcher runs (lab.sh ``pid_of``: ``hosts/<host>/pid``).

    + lab_dir: the instance's state directory (``KVCEPH_LAB_DIR``)
    """
    up = []
    for pid_file in sorted(Path(lab_dir).glob("hosts/*/pid")):
        try:
            comm = Path(f"/proc/{pid_file.read_text().strip()}/comm").read_text().strip()
        except (OSError, ValueError):
            continue
        if comm == "systemd-nspawn":
            up.append(pid_file.parent.name)
    return up


def down_message(lab_dir: str | Path, instance: int) -> str | None:
    """The one line for a lab none of whose hosts runs, else None.

    + instance: ``KVCEPH_LAB_INSTANCE`` (0: the default lab, no prefix in the fix)
    """
    if running_hosts(lab_dir):
        return None
    env = f"KVCEPH_LAB_INSTANCE={instance} " if instance else ""
    return (
        f"kvceph: lab instance {instance} ({lab_dir}) is not up: none of its hosts runs; "
        f"fix: `{env}make lab` (up, deploy, verify) or `{env}make lab-up` (up only)"
    )


def pyinfra_cli_run(argv: list[str] | None = None) -> bool:
    """Whether this process is a pyinfra CLI run that connects to the hosts (not a test loading
    the inventory, not ``debug-inventory``)."""
    argv = sys.argv if argv is None else argv
    if not argv or "debug-inventory" in argv:
        return False
    program = Path(argv[0])
    return program.name == "pyinfra" or program.parent.name == "pyinfra_cli"


def main(args: list[str]) -> int:
    """``LAB_DIR INSTANCE``: print the one line and return 1 when the lab is down."""
    message = down_message(args[0], int(args[1] or 0))
    if message:
        print(message)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
