"""Verdicts for each failure mode, with the likely cause in the message."""

from deploys.verification import verdicts as v


def test_cold_no_objects_names_reachability_and_s3_disabled():
    r = v.cold(16414, created=0, expected=128, s3_disabled=True)
    assert r.failed
    assert "no objects written (none of the 128 names found)" in r.message
    assert "PYTHONHASHSEED" in r.message
    assert "EndpointConnectionError" in r.message
    assert "S3 connection disabled" in r.message


def test_cold_fewer_objects_points_at_chunk_settings():
    r = v.cold(16414, created=64, expected=128)
    assert r.failed and "64 of 128" in r.message and "chunk size" in r.message
    assert "S3 connection disabled" not in r.message


def test_cold_ok_and_short_document():
    assert v.cold(16414, 128, 128).status == v.PASS
    assert v.cold(100, 0, 0).failed
    assert v.cold(None, 0, 0).failed


def _warm(**kw):
    args = dict(
        hit=16384.0,
        expected_hit=16384,
        metric="m",
        warm_ttft=1.0,
        cold_ttft=4.0,
        ratio=1.0,
        kv_bytes=4 * 2**30,
        objects=128,
    )
    return v.warm(**{**args, **kw})


def test_warm_pass_reports_bandwidth():
    r = _warm()
    assert r.status == v.PASS
    assert "x0.25" in r.message and "load 4.29 GB/s vs break-even 1.07 GB/s" in r.message


def test_warm_no_hit_with_objects_is_chunk_mismatch():
    r = _warm(hit=0.0)
    assert r.failed and "chunks written but never read back" in r.message


def test_warm_no_hit_without_objects_is_unreachable():
    r = _warm(hit=0.0, objects=0)
    assert r.failed and "cannot reach RGW" in r.message


def test_warm_partial_hit_and_missing_metric():
    assert "partial hit: 8192 of 16384" in _warm(hit=8192.0).message
    assert "exposes neither" in _warm(hit=None).message


def test_warm_no_speedup_is_a_plain_warning_not_a_failure():
    r = _warm(warm_ttft=5.0)
    assert r.status == v.WARN
    assert "storage path is slower than recompute" in r.message
    # A stricter threshold moves the same figures to a warning too.
    assert _warm(warm_ttft=3.0, ratio=0.5).status == v.WARN


def test_cross_node_miss_and_hit():
    miss = v.cross_node(
        hit=0.0, expected_hit=16384, metric="m", writer="gpu1", ttft=4.0, cold_ttft=4.0
    )
    assert miss.failed and "no cross-node hit on the chunks gpu1 wrote" in miss.message
    assert "PYTHONHASHSEED" in miss.message
    hit = v.cross_node(
        hit=16384.0, expected_hit=16384, metric="m", writer="gpu1", ttft=1.0, cold_ttft=4.0
    )
    assert hit.status == v.PASS


def _fb(**kw):
    args = dict(
        refused=None, deleted=128, error=None, hit=0.0, ttft=4.2, cold_ttft=4.0, tolerance=0.5
    )
    return v.fallback(**{**args, **kw})


def test_fallback_recovers():
    assert _fb().status == v.PASS


def test_fallback_failure_modes():
    assert "fallback not tested: 3 new" in _fb(refused="3 new objects").message
    err = _fb(error="HTTP 500: KV load failed", ttft=None)
    assert err.failed and "kv_load_failure_policy recompute" in err.message
    still = _fb(hit=16384.0)
    assert still.failed and "still loaded" in still.message
    fast = _fb(ttft=1.0)
    assert fast.failed and "beyond +-50%" in fast.message


def test_fallback_ignores_scheduling_noise_at_sub_second_ttfts():
    # CI on a loaded machine: cold 16 ms, fallback 24 ms (x1.52) is noise, not a missing-key wait.
    assert _fb(ttft=0.024, cold_ttft=0.016).status == v.PASS
    # A wait on missing keys costs seconds and still fails, however small cold was.
    slow = _fb(ttft=0.016 + 2.0, cold_ttft=0.016)
    assert slow.failed and "blocking_timeout_secs" in slow.message
    assert _fb(ttft=4.0 + 2.5, cold_ttft=4.0).failed
