"""The benchmark's Ansible peer renders kvceph's files for the same lab kvceph deploys."""

import importlib.util
import os
from pathlib import Path

PATH = Path(__file__).resolve().parents[2] / "bench" / "ansible_vars.py"
spec = importlib.util.spec_from_file_location("ansible_vars", PATH)
ansible_vars = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ansible_vars)


# http: no lab CA file needed (none exists before a lab is up)
ENV = {**os.environ, "KVCEPH_LAB_S3_SCHEME": "http"}


def test_the_benchmark_lab_keeps_the_hub_source_the_peer_writes():
    bench = ansible_vars.lab_host_settings(environ={**ENV, "KVCEPH_LAB_HOSTS": "2"})
    assert bench.engine.source.source == "hub"
    assert bench.engine.serve_model == "Qwen/Qwen3-32B"
    lab = ansible_vars.lab_host_settings(
        environ={k: v for k, v in ENV.items() if k != "KVCEPH_LAB_HOSTS"}
    )
    assert lab.engine.source.source == "mirror"


def test_the_environment_is_restored():
    before = dict(os.environ)
    ansible_vars.lab_host_settings(
        environ={"KVCEPH_LAB_HOSTS": "3", "KVCEPH_LAB_S3_SCHEME": "http"}
    )
    assert dict(os.environ) == before
