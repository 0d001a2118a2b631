"""Record the commands behind the facts kvceph reads on every host: a ``--dry`` plan (which
runs only fact commands) with pyinfra's SSH connector wrapped to note each command it sends.

    python bench/fact_commands.py OUT.json -- --dry inventories/lab.py deploy.py

OUT.json maps host -> its distinct commands, in order (a fact read twice is kvceph's cost,
not the floor's). Commands that are no facts (the run lock's flock channel) are recorded too:
kvceph needs them before it reads anything.
"""

from __future__ import annotations

import json
import sys

from pyinfra.connectors import ssh


def main() -> None:
    out = sys.argv[1]
    sys.argv = ["pyinfra", *sys.argv[sys.argv.index("--") + 1 :]]
    seen: dict[str, list[str]] = {}
    original = ssh.SSHConnector.run_shell_command

    def recording(self, command, *args, **kwargs):
        raw = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
        commands = seen.setdefault(self.host.name, [])
        if raw not in commands:
            commands.append(raw)
        return original(self, command, *args, **kwargs)

    ssh.SSHConnector.run_shell_command = recording
    from pyinfra_cli.main import main as pyinfra_main

    try:
        pyinfra_main()
    except SystemExit as exc:
        if exc.code:
            raise
    finally:
        with open(out, "w") as f:
            json.dump(seen, f, indent=1)


if __name__ == "__main__":
    main()
