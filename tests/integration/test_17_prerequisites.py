"""Host prerequisites (deploys/engine/prerequisites.py) on the lab: a host without python3-venv and
a host whose accelerator tool fails stop the deploy in preflight, one line per problem naming
host and fix, before any stage: nothing changes on any host."""

from __future__ import annotations

import re
import shlex

from conftest import pyinfra, ssh

NEXT_VENV = "/opt/kvceph/venv-next"  # a venv that does not exist yet: it must be created
# What nvidia-smi prints (exit 9) where the driver is not loaded.
NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
FAKE_TOOL = "/usr/local/bin/nvidia-smi"
STATE = (
    "find /opt/kvceph /etc/kvceph /etc/systemd/system /var/lib/vllm -maxdepth 2 2>/dev/null"
    " | sort | xargs -r stat -c '%n %Y %s'; systemctl show -p MainPID --value vllm"
)


def test_missing_python3_venv_and_a_failing_tool_stop_the_deploy_before_any_stage(converged):
    where = ssh(
        "gpu2", "python3 -c 'import ensurepip, os; print(os.path.dirname(ensurepip.__file__))'"
    )
    ensurepip = where.stdout.strip()
    before = {h: ssh(h, STATE).stdout for h in ("gpu1", "gpu2")}
    # Debian without python3-venv: no ensurepip. gpu1: a driver that does not answer.
    ssh("gpu2", f"mv {ensurepip} {ensurepip}.kvlab-hidden")
    tool = shlex.quote(f'#!/bin/sh\necho "{NO_DRIVER}"\nexit 9\n')
    ssh("gpu1", f"printf '%s' {tool} > {FAKE_TOOL}; chmod 755 {FAKE_TOOL}")
    try:
        run = pyinfra(
            "--data", f"kvceph_venv={NEXT_VENV}", "--data", "kvceph_accelerator_check=True",
            json_out=False, timeout=300,
        )  # fmt: skip
    finally:
        ssh("gpu2", f"mv {ensurepip}.kvlab-hidden {ensurepip}")
        ssh("gpu1", f"rm -f {FAKE_TOOL}")
    assert run.rc != 0
    # The profile's venv is named by its digest beside kvceph_venv (deploys/engine/engine_lock.py).
    assert re.search(
        rf"gpu2: python3 cannot create the venv {NEXT_VENV}-[0-9a-f]{{12}} \(no ensurepip\); fix: "
        "apt-get install python3-venv",
        run.output,
    ), run.output[-3000:]
    assert f"gpu1: nvidia-smi failed (exit 9: {NO_DRIVER}" in run.output
    # Before any stage: no operation started, nothing changed.
    assert "Starting operation" not in run.output and "Engine software" not in run.output
    assert {h: ssh(h, STATE).stdout for h in ("gpu1", "gpu2")} == before
    assert ssh("gpu2", f"ls -d {NEXT_VENV}*", check=False).returncode != 0
