"""LMCache's buffer and timeouts on the lab (issue 10): the values that failed on a real H200,
scaled to the lab, make verify.py fail with the cause named; the derived values pass.

What failed on the H200 (docs/procedure.md, "Pinned memory and timeouts"): Qwen3-32B at TP 1
(262,144 bytes of KV per token) loaded at ~0.86 GB/s from one radosgw; LMCache's default
lookup_timeout_ms 3000 gave up before the load (0 hits after every restart), and
max_local_cpu_size 5 GiB could not hold a 30k-token request (8 GiB).

Scaled to the lab (lab/engine/README.md "Sizes and scaling"): bytes scale with KV per token per
worker (64 here vs 262,144 there: 5 GiB -> 1.25 MiB), time with load time per token (128 bytes
at 2 MB/s here, 262,144 at 0.86 GB/s there: 3000 ms -> 630 ms). The verify document has the
H200 run's 30k tokens. The lab engine decides from bytes against the buffer and fetch time
against the timeout, as LMCache does, and logs LMCache's own lines, which verify.py names.
"""

from __future__ import annotations

import pytest
import yaml
from conftest import pyinfra, ssh

H200_KV_PER_TOKEN, H200_LOAD_BYTES_PER_S = 262_144, 0.86e9  # TP 1, measured (recipe)
LAB_KV_PER_WORKER, LAB_KV_PER_TOKEN, LAB_LOAD_BYTES_PER_S = 64, 128, 2e6  # group_data/lab.py
OLD_CPU_GIB = 5.0 * LAB_KV_PER_WORKER / H200_KV_PER_TOKEN
TIME_SCALE = (LAB_KV_PER_TOKEN / LAB_LOAD_BYTES_PER_S) / (H200_KV_PER_TOKEN / H200_LOAD_BYTES_PER_S)
OLD_TIMEOUT_MS = round(3000 * TIME_SCALE)
OLD = (
    "--data",
    f"kvceph_lmcache_max_local_cpu_size={OLD_CPU_GIB}",
    "--data",
    f"kvceph_lmcache_lookup_timeout_ms={OLD_TIMEOUT_MS}",
)
H200_DOCUMENT = ("--data", "kvceph_verify_document_tokens=30000")


def _verify():
    return pyinfra(*H200_DOCUMENT, deploy="verify.py", json_out=False, timeout=600)


def _failed(run) -> dict[str, str]:
    """'host: step' -> the failure line."""
    out = {}
    for line in run.output.splitlines():
        if "kvceph verify FAILED:" in line:
            rest = line.split("kvceph verify FAILED:", 1)[1].strip()
            host, step, _ = (rest.split(": ", 2) + ["", ""])[:3]
            out[f"{host}: {step}"] = rest
    return out


@pytest.fixture
def old_values(converged):
    """The H200's failing lmcache.yaml, scaled; the derived one is deployed again after."""
    deploy = pyinfra(*OLD, json_out=False)
    try:
        yield deploy
    finally:
        restore = pyinfra(json_out=False)
        assert restore.rc == 0, restore.output[-4000:]


def test_old_values_fail_verify_with_the_cause_named(old_values):
    assert OLD_TIMEOUT_MS == 630 and round(OLD_CPU_GIB * (1 << 20)) == 1280  # GiB -> KiB
    assert old_values.rc == 0, old_values.output[-4000:]
    # The plan already said what would happen, in LMCache's words.
    assert "'Failed to allocate memory block') and recompute" in old_values.output
    assert "('is still waiting for async lookup') and recompute" in old_values.output
    config = yaml.safe_load(ssh("gpu1", "cat /etc/kvceph/lmcache.yaml").stdout)
    assert config["lookup_timeout_ms"] == OLD_TIMEOUT_MS
    assert config["max_local_cpu_size"] == OLD_CPU_GIB

    run = _verify()
    assert run.rc != 0, run.output[-4000:]
    failed = _failed(run)
    warm = failed.get("gpu1: warm", "")
    assert "no tokens loaded from the cache" in warm, (failed, run.output[-3000:])
    assert "'Failed to allocate memory block'" in warm and "max_local_cpu_size" in warm
    assert "'is still waiting for async lookup'" in warm and "lookup_timeout_ms" in warm
    assert "chunk-size mismatch" not in warm  # the generic guess gives way to the engine's word
    assert "lookup_timeout_ms" in failed.get("gpu2: cross-node", ""), failed
    # The engine logged LMCache's exact lines.
    journal = ssh("gpu1", "journalctl -u vllm --no-pager -q -n 2000").stdout
    assert (
        "is still waiting for async lookup after 0 seconds, returning 0 lmcache cached tokens "
        "so vllm can recompute" in journal
    )
    assert "Failed to allocate memory block of size 16384 because no memory is available" in (
        journal
    )


def test_derived_values_pass_verify_at_the_same_length(converged):
    config = yaml.safe_load(ssh("gpu1", "cat /etc/kvceph/lmcache.yaml").stdout)
    assert config["max_local_cpu_size"] == 0.004 and config["lookup_timeout_ms"] == 7865
    run = _verify()
    assert run.rc == 0, run.output[-5000:]
    assert "all checks passed" in run.output
