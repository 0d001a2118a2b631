"""verify.py's DRAM step (deploys/verification/dram.py): a same-node repeat with the run's
cache_salt, judged on hits, S3 reads, vLLM's own prefix cache and TTFT against cold."""

from __future__ import annotations

import dataclasses

from test_verification_runner import _by_step, _run, lab  # noqa: F401 - the fixture

from deploys.verification import dram


def _dram_target(add, name):
    t = add(name)
    return dataclasses.replace(t, local_cpu=True)


def test_a_same_node_repeat_is_served_from_dram_then_warm_from_s3(lab):  # noqa: F811
    bucket, engines, add = lab
    a, b = _dram_target(add, "gpu1"), _dram_target(add, "gpu2")
    for e in engines.values():
        e.local_cpu = e.lmcache_metrics = True
    # the fake's cold takes 0.2 s: a loaded test machine's HTTP round trips weigh in the ratio
    rep, control = _run(bucket, engines, [[a, b]], dram_ratio=0.5)
    steps = _by_step(rep)
    assert not rep.failures, rep.failure_lines()
    repeat = steps[("gpu1", "dram")]
    assert repeat.verdict.status == "pass" and repeat.hit_tokens == 1024
    assert "no S3 reads" in repeat.verdict.message
    assert repeat.figures["gpu_prefix_hit_tokens"] == 0
    assert repeat.ttft < steps[("gpu1", "cold")].ttft * 0.5
    # no restart for the DRAM step; the warm step after its restart read S3
    assert control.restarts == ["gpu1", "gpu1"]
    assert steps[("gpu1", "warm")].hit_tokens == 1024  # the restart emptied its DRAM
    assert [s.step for s in rep.steps if s.host == "gpu1"][1:4] == ["cold", "dram", "warm"]


def test_the_dram_step_is_skipped_when_the_tier_is_off(lab):  # noqa: F811
    bucket, engines, add = lab
    rep, _ = _run(bucket, engines, [[add("gpu1")]])
    assert _by_step(rep)[("gpu1", "dram")].verdict.message.startswith("skipped: the DRAM tier")


def test_an_engine_ignoring_cache_salt_fails_the_dram_step(lab):  # noqa: F811
    bucket, engines, add = lab
    a = _dram_target(add, "gpu1")
    engines["gpu1"].local_cpu, engines["gpu1"].honours_salt = True, False
    rep, _ = _run(bucket, engines, [[a]])
    verdict = _by_step(rep)[("gpu1", "dram")].verdict
    assert verdict.status == "fail" and "ignores cache_salt" in verdict.message


def test_a_repeat_read_from_s3_is_not_a_dram_hit(lab):  # noqa: F811
    bucket, engines, add = lab
    a = _dram_target(add, "gpu1")  # the settings say DRAM; the engine has none (evicted)
    engines["gpu1"].lmcache_metrics = True
    rep, _ = _run(bucket, engines, [[a]])
    verdict = _by_step(rep)[("gpu1", "dram")].verdict
    assert verdict.status == "fail" and "read from S3" in verdict.message


def _repeat(**kw):
    args = dict(hit=4096, expected_hit=4096, metric="m", gpu_hit=0, remote_read=0,
                ttft=0.2, cold_ttft=2.9, ratio=0.15, kv_bytes=1 << 30)  # fmt: skip
    return dram.repeat(**(args | kw))


def test_the_repeat_verdicts():
    assert _repeat().status == "pass"
    # the H200's 16k figures (hw/h200/results/2026-12-03-v033): x0.065-0.09 passes at x0.15
    assert _repeat(ttft=0.26, cold_ttft=2.81).status == "pass"
    slow = _repeat(ttft=1.64, cold_ttft=2.81)  # an S3 warm's TTFT
    assert slow.status == "fail" and "kvceph_verify_dram_ratio" in slow.message
    assert "judged by TTFT" in _repeat(remote_read=None).message
    miss = _repeat(hit=0)
    assert miss.status == "fail" and "kvceph_lmcache_local_cpu" in miss.message
    assert _repeat(hit=1024).status == "fail"  # partial
    assert _repeat(hit=None).status == "fail"  # no hit counter


def test_the_salt_is_the_runs():
    run = "20261203T190058Z-11d0abbb5e8c"
    assert dram.salt(run) == f"kvceph-verify-{run}"
