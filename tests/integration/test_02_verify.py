"""verify.py on the lab: the full cycle passes, and drift after the deploy is caught.

The deploy's own checks refuse a differing hash seed or chunk size inside a cache group, so
these faults are injected out of band, as an operator's hand edit would be.
"""

from __future__ import annotations

import json
import threading

import pytest
from conftest import (
    GPU_KEY_PREFIX,
    HOSTS,
    REPORTS,
    S3_URL,
    pyinfra,
    s3_client,
    secrets,
    ssh,
    start_rgw,
    stop_rgw,
)
from lab_client import wait_health

BUCKET = "lmcache"
MODEL_PREFIX = GPU_KEY_PREFIX  # the GPU cache group's (TP=2) keys, in its namespace


def verify(*args: str):
    return pyinfra(*args, deploy="verify.py", json_out=False, timeout=600)


def failed_lines(run) -> list[str]:
    return [line for line in run.output.splitlines() if "kvceph verify FAILED:" in line]


def _other_traffic(s3, written: list[str], stop: threading.Event) -> None:
    """A live fleet's other requests: an object under the model's prefix every 0.3 s."""
    while not stop.wait(0.3):
        key = f"{MODEL_PREFIX}0@f0{len(written):014x}@bfloat16"
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"other traffic")
        written.append(key)


def test_full_cycle_passes_and_writes_the_report(converged):
    # verify.py as on a live fleet: objects others write under the same model prefix while it
    # runs are neither counted as the run's nor deleted (it finds its objects by name), and only
    # the canary engines are restarted (kvceph_verify_canary_hosts), gpu1 is only asked.
    s3 = s3_client()
    production_pid = _main_pid("gpu1")
    foreign: list[str] = []
    stop = threading.Event()
    writer = threading.Thread(target=_other_traffic, args=(s3, foreign, stop), daemon=True)
    writer.start()
    try:
        run = verify("--data", 'kvceph_verify_canary_hosts=["gpu2", "gaudi1"]')
    finally:
        stop.set()
        writer.join(timeout=30)
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=f"{MODEL_PREFIX}0@f0"
        )
        survived = {o["Key"] for page in pages for o in page.get("Contents", ())}
        assert len(foreign) > 10 and set(foreign) <= survived, (len(foreign), len(survived))
    finally:
        for i in range(0, len(foreign), 1000):
            batch = [{"Key": k} for k in foreign[i : i + 1000]]
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": batch, "Quiet": True})
    assert run.rc == 0, run.output[-5000:]
    assert "all checks passed" in run.output
    assert _main_pid("gpu1") == production_pid, "verify restarted an engine that is no canary"
    for step in ("cold", "dram", "warm", "cross-node", "fallback"):
        assert f"gpu1        {step}" in run.output or f"gpu2        {step}" in run.output
    report = json.loads((REPORTS / "verify-latest.json").read_text())
    assert report["passed"] is True
    verdicts = {(s["host"], s["step"]): s["verdict"] for s in report["steps"]}
    assert verdicts[("gpu2", "cold")] == "pass"
    steps = {(s["host"], s["step"]): s for s in report["steps"]}
    cold = steps[("gpu2", "cold")]
    # Every object the run named was found, and cleanup removed those (found by name) again.
    assert cold["objects"] == cold["figures"]["expected_objects"] > 0
    assert steps[("gpu2", "cleanup")]["objects"] == cold["objects"]
    assert verdicts[("gpu2", "dram")] == "pass"  # a same-node repeat, from the DRAM tier
    assert verdicts[("gpu2", "warm")] == "pass"
    assert verdicts[("gpu1", "cross-node")] == "pass"
    assert verdicts[("gaudi1", "cross-node")] == "skip"  # one host in its group: said, not passed
    # verify.py sent the engines' API key (they answer 401 without it) and shows no secret.
    keys = secrets()
    assert keys.get("KVCEPH_VLLM_API_KEY"), "the lab runs with an API key"
    shown = run.output + (REPORTS / "verify-latest.json").read_text()
    for name in (
        "KVCEPH_S3_ADMIN_SECRET_KEY",
        "KVCEPH_S3_SECRET_KEY_GPU",
        "KVCEPH_VLLM_API_KEY",
        "KVCEPH_HF_TOKEN",
    ):
        assert not keys.get(name) or keys[name] not in shown, name
    # A converged deploy stays converged after the verifier restarted engines.
    assert pyinfra().changed() == []


def _edit_and_restart(host: str, sed: str, path: str) -> None:
    ssh(host, f"sed -i '{sed}' {path} && systemctl restart vllm")
    wait_health(HOSTS[host])


def _main_pid(host: str) -> str:
    return ssh(host, "systemctl show -p MainPID --value vllm.service").stdout.strip()


@pytest.fixture
def gpu2_drift(converged):
    """Hand-edit gpu2 and restart it; afterwards the deploy must repair it (restart included)."""
    yield lambda sed, path: _edit_and_restart("gpu2", sed, path)
    drifted_pid = _main_pid("gpu2")
    repair = pyinfra()
    assert repair.rc == 0, repair.output[-4000:]
    assert {h for _, h in repair.changed()} == {"gpu2"}
    assert _main_pid("gpu2") != drifted_pid, "the deploy left the drifted engine running"
    assert pyinfra().changed() == []


@pytest.mark.parametrize(
    "sed, path, named",
    [
        (
            "s/^PYTHONHASHSEED=.*/PYTHONHASHSEED=68/",
            "/etc/kvceph/vllm.env",
            ("PYTHONHASHSEED", "hash"),
        ),
        ("s/^chunk_size: .*/chunk_size: 512/", "/etc/kvceph/lmcache.yaml", ("chunk",)),
    ],
    ids=["hash_seed", "chunk_size"],
)
def test_a_differing_cache_key_setting_means_no_cross_node_hit(gpu2_drift, sed, path, named):
    gpu2_drift(sed, path)
    run = verify()
    assert run.rc != 0
    lines = failed_lines(run)
    assert any("gpu2: cross-node" in line for line in lines), run.output[-4000:]
    assert any(word in line for line in lines for word in named), lines


def test_rgw_stopped_is_named_in_preflight(converged):
    stop_rgw()
    try:
        run = verify()
    finally:
        start_rgw()
    assert run.rc != 0
    lines = failed_lines(run)
    assert any(S3_URL in line for line in lines), run.output[-4000:]
    # Nothing but the S3 preflight failed: engines were healthy, no cache step ran.
    assert not any(": cold:" in line or ": warm:" in line for line in lines), lines
    assert (REPORTS / "verify-latest.json").exists()
