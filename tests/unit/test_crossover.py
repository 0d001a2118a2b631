"""Crossover arithmetic (deploys/tier/crossover.py): the prefill fit, load vs prefill, rounding, and
where the figure comes from."""

import math

import pytest

from deploys.tier import crossover as c

H200 = c.DEFAULT_PREFILL["nvidia"]  # 4,100 tok/s at 16k, 2,440 at 128k
QWEN32_TP1 = 262_144  # KV bytes per token, bf16


def test_fit_passes_through_two_measured_lengths():
    p = c.fit_rates(H200)
    assert p.rate(16384) == pytest.approx(4100)
    assert p.rate(131072) == pytest.approx(2440)
    assert p.a == pytest.approx(2.202e-4, rel=1e-3) and p.b == pytest.approx(1.4468e-9, rel=1e-3)
    # Superlinear: shorter prompts prefill faster than the 16k figure.
    assert p.rate(4096) > 4100


def test_fit_least_squares_over_three_points():
    exact = c.Prefill(2e-4, 1e-9)
    p = c.fit((n, exact.seconds(n)) for n in (8192, 32768, 131072))
    assert p.a == pytest.approx(2e-4) and p.b == pytest.approx(1e-9)


def test_one_length_is_a_straight_line():
    p = c.fit_rates(((16384, 2000.0),))
    assert (
        p.b == 0 and p.rate(1000) == pytest.approx(2000) and p.rate(100000) == pytest.approx(2000)
    )


def test_nearby_lengths_give_a_line_not_a_wild_curve():
    # The lab's flat 5,000 tok/s at 16384 beside verify.py's cold at 16411 tokens: one length.
    p = c.fit(((16384, 16384 / 5000), (16411, 3.394)))
    assert p.b == 0 and 2e-4 < p.a < 2.1e-4
    assert c.crossover_tokens(p, 1.549 / 16411) == 0.0  # warm x0.46: pays at every length


def test_sublinear_data_falls_back_to_a_line():
    p = c.fit(((1000, 1.0), (2000, 1.5)))  # second length cheaper per token
    assert p.b == 0 and p.a > 0


def test_fit_refuses_nonsense():
    with pytest.raises(ValueError):
        c.fit(())
    with pytest.raises(ValueError):
        c.fit(((1000, 0.0),))


def test_crossover_where_load_meets_prefill():
    p = c.fit_rates(H200)
    # 0.6 GB/s (the stock connector on the first rig): pays only above ~150k tokens.
    slow = QWEN32_TP1 / 0.6e9
    n = c.crossover_tokens(p, slow)
    assert n == pytest.approx((slow - p.a) / p.b)
    assert 140_000 < n < 160_000
    # At the crossover loading and prefilling take the same time.
    assert n * slow == pytest.approx(p.seconds(n))
    # 2.5 GB/s (the recipe's ceiling): loading beats prefill at every length.
    assert c.crossover_tokens(p, QWEN32_TP1 / 2.5e9) == 0.0
    # A straight-line prefill slower per token than prefill: never pays.
    assert c.crossover_tokens(c.Prefill(1e-4, 0.0), 2e-4) is None


def test_min_hit_tokens_rounds_up_to_chunks_and_caps():
    assert c.min_hit_tokens(0.0, 256, 32768) == 0
    assert c.min_hit_tokens(3000.2, 256, 32768) == 3072
    assert c.min_hit_tokens(3072, 256, 32768) == 3072
    # Never pays, or pays only beyond the longest request: no request reads S3.
    assert c.min_hit_tokens(None, 256, 32768) == 33024
    assert c.min_hit_tokens(150_000, 256, 32768) == 33024


def _decide(**kw):
    args = dict(
        override=None,
        measured=None,
        measured_path="measured/Qwen--Qwen3-32B-tp1.json",
        prefill_points=H200,
        configured_load_s_per_token=QWEN32_TP1 / 0.7e9,
        chunk_size=256,
        max_model_len=131072,
    )
    return c.decide(**{**args, **kw})


def test_first_deploy_never_skips_and_says_so():
    d = _decide()
    assert d.min_hit_tokens == 0
    assert "not measured yet" in d.source and "measured/Qwen--Qwen3-32B-tp1.json" in d.source
    assert "estimate ~" in d.source and d.estimate > 16384


def test_the_setting_wins():
    assert (
        _decide(override=8192, measured={"x": 1}).describe()
        == "8192 tokens (kvceph_min_hit_tokens)"
    )


def test_measured_figures_decide():
    # verify.py at 16k: 4.29 GB loaded in 2.0 s (2.1 GB/s), cold 4.0 s.
    measured = {
        "prompt_tokens": 16384,
        "cold_ttft_s": 4.0,
        "warm_ttft_s": 2.0,
        "kv_bytes": 16384 * QWEN32_TP1,
        "verify_run": "v1",
        "measured_at": "2026-12-01T20:00:00+00:00",
    }
    d = _decide(measured=measured)
    # load 2.0 s / 16384 tokens = 1.22e-4 s per token < a: pays at every length.
    assert d.min_hit_tokens == 0 and d.estimate == 0.0
    assert "verify.py run v1" in d.source and "2.15 GB/s" in d.source
    slow = {**measured, "warm_ttft_s": 7.2}  # x1.8 of cold, as the first H200 proof
    d = _decide(measured=slow)
    assert d.min_hit_tokens % 256 == 0 and d.min_hit_tokens > 16384
    assert d.min_hit_tokens == min(131328, math.ceil(d.estimate / 256) * 256)


def test_a_new_measurement_replaces_the_old_only_beyond_noise():
    assert c.worth_replacing(0, 0, False, 256)  # first measurement: always stored
    assert not c.worth_replacing(40960, 43008, True, 256)  # +5 %: noise
    assert c.worth_replacing(40960, 46080, True, 256)  # +12.5 %
    assert not c.worth_replacing(0, 512, True, 256)  # two chunks: noise
    assert c.worth_replacing(0, 1024, True, 256)
