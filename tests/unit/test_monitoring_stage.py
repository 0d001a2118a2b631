"""The Monitoring stage planned with ``--dry`` against pyinfra's ``@fake`` connector: on a fresh
monitoring host it writes every file, on a converged one nothing (idempotent), only there, and
the engines' API key never shows (tests/inventories/fake_monitoring*.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "tests" / "inventories"
PYINFRA = Path(sys.executable).parent / "pyinfra"
sys.path.insert(0, str(INVENTORIES))

import fake_facts  # noqa: E402

FILES = 15  # 2 directories, 10 Prometheus files, the key, the Grafana directory and dashboard


def _plan(scenario: str) -> tuple[list[dict], str]:
    env = {
        **os.environ,
        **fake_facts.fake_env(),
        "KVCEPH_VLLM_API_KEY": fake_facts.FAKE_API_KEY,
        "KVCEPH_HF_TOKEN": fake_facts.FAKE_HF_TOKEN,
        "PYINFRA_FAKE_DELAY": "0",
        "PYINFRA_FAKE_DELAY_JITTER": "0",
    }
    cmd = [str(PYINFRA), "--dry", "--json", f"tests/inventories/{scenario}.py", "deploy.py"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout[proc.stdout.find("{") :])["plan"]
    return [op for op in plan if op["name"].startswith("Monitoring | ")], proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("scenario", "changes"),
    [("fake_monitoring", FILES), ("fake_monitoring_converged", 0)],
)
def test_monitoring_stage_plans_its_files_once_and_hides_the_key(scenario, changes):
    ops, output = _plan(scenario)
    assert len(ops) == FILES, [op["name"] for op in ops]
    changed = [op for op in ops if op["hosts_with_change"] or op["hosts_with_conditional_change"]]
    assert len(changed) == changes, [op["name"] for op in changed]
    assert all(op["hosts_with_change"] == ["@fake/ceph1"] for op in changed)
    assert fake_facts.FAKE_API_KEY not in output
