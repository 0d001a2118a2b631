"""The whole deploy against pyinfra's @fake connector, for the tests of one stage's failure.

``run(inventory, *flags)`` runs ``pyinfra <flags> <inventory> deploy.py`` from the repo root
with the fake keys; tests/inventories/fake_facts.py scripts each inventory's cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"
sys.path.insert(0, str(REPO / "tests" / "inventories"))

import fake_facts  # noqa: E402
from test_dry_run_fake import _commands  # noqa: E402, F401 - re-used by the stage tests


def run(inventory: str, *flags: str, env: dict | None = None) -> tuple[int, str]:
    """(exit status, stdout + stderr) of one pyinfra run of deploy.py."""
    environ = {
        **os.environ,
        **fake_facts.fake_env(),
        "PYINFRA_FAKE_DELAY": "0",
        "PYINFRA_FAKE_DELAY_JITTER": "0",
        **(env or {}),
    }
    proc = subprocess.run(
        [str(PYINFRA), *flags, inventory, "deploy.py"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr
