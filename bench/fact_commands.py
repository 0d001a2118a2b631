"""Record the commands behind the facts kvceph reads on one host: a ``--dry`` plan (which runs
only fact commands) with pyinfra's SSH connector wrapped to note each command sent to HOST.

    python bench/fact_commands.py HOST OUT.json -- --dry inventories/lab.py deploy.py
"""

from __future__ import annotations

import json
import sys

from pyinfra.connectors import ssh


def main() -> None:
    host, out = sys.argv[1], sys.argv[2]
    sys.argv = ["pyinfra", *sys.argv[sys.argv.index("--") + 1 :]]
    seen: list[str] = []
    original = ssh.SSHConnector.run_shell_command

    def recording(self, command, *args, **kwargs):
        if self.host.name == host:
            raw = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
            seen.append(raw)
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
