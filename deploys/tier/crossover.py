"""The crossover: the shortest hit for which loading KV from S3 beats prefilling it.

Pure module (no pyinfra, no files). kvceph's connector reports 0 hits in its lookup below
``kvceph.min_hit_tokens`` (lmcache.yaml), so such requests recompute without reading S3; LMCache's
own ``min_retrieve_tokens`` cannot do that with async loading (the lookup has fetched every chunk
by the time it compares).

Prefill is superlinear in the prompt length (attention), so one rate does not describe it::

    prefill(n) = a n + b n^2           seconds, fitted to cold TTFTs at >= 2 lengths
    load(n)    = n x warm TTFT / tokens  seconds, verify.py's warm load of one cache group
    crossover  = smallest n with load(n) < prefill(n)  =  (c - a) / b,  c = load per token

where ``c`` is a whole engine's load per token (all tensor-parallel workers; the warm TTFT
includes the engine's own overheads, so the figure is conservative). With ``c <= a`` loading
pays at every length (crossover 0); with ``b = 0`` and ``c > a`` it never does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

# Cold prefill rates (tokens/s) by prompt length, Qwen3-32B: H200 TP 1 measured 4,100 tok/s at
# 16k and 2,440 at 128k (hw/h200, issue 20); Gaudi3 TP 2 ~2,000 at 16k (ceph.io blog
# 2025-12-10, ~8 s cold), one length only: linear. Other models: kvceph_prefill_tokens_per_s.
DEFAULT_PREFILL = {
    "nvidia": ((16384, 4100.0), (131072, 2440.0)),
    "gaudi": ((16384, 2000.0),),
}
# A single configured rate (the old flat kvceph_prefill_tokens_per_s) is taken at this length.
FLAT_AT_TOKENS = 16384
# The curve is fitted only over lengths at least this far apart (longest / shortest); closer
# points give a straight line (verify.py's 16k cold TTFT beside a 16k figure is one length).
MIN_SPREAD = 2.0


@dataclass(frozen=True)
class Prefill:
    """prefill(n) = a n + b n^2 seconds."""

    a: float  # seconds per token
    b: float  # seconds per token^2

    def seconds(self, tokens: float) -> float:
        return self.a * tokens + self.b * tokens * tokens

    def rate(self, tokens: float) -> float:
        """Tokens/s of a cold prompt of ``tokens``."""
        return tokens / self.seconds(tokens)


def fit(points: Iterable[tuple[int, float]]) -> Prefill:
    """Least squares of prefill(n) = a n + b n^2 through (tokens, seconds), a, b >= 0.

    + points: (prompt tokens, cold TTFT seconds); lengths spanning MIN_SPREAD fit the curve,
      closer ones give a straight line (b = 0)

    H200 (16384 tokens, 4.0 s) and (131072, 53.7 s): a = 2.20e-4 s, b = 1.45e-9 s.
    """
    pts = [(float(n) / 1000, float(t)) for n, t in points]  # thousands: sane magnitudes
    if not pts or any(n <= 0 or t <= 0 for n, t in pts):
        raise ValueError(f"prefill points {list(points)} must be positive (tokens, seconds)")

    def line() -> Prefill:
        return Prefill(sum(n * t for n, t in pts) / sum(n * n for n, _ in pts) / 1000, 0.0)

    lengths = [n for n, _ in pts]
    if max(lengths) < MIN_SPREAD * min(lengths):
        # Lengths this close carry no curvature: two points 1% apart would fit any b.
        return line()
    s2, s3, s4 = (sum(n**k for n, _ in pts) for k in (2, 3, 4))
    y1, y2 = sum(n * t for n, t in pts), sum(n * n * t for n, t in pts)
    det = s2 * s4 - s3 * s3
    a, b = (y1 * s4 - y2 * s3) / det, (s2 * y2 - s3 * y1) / det
    if b < 0:
        return line()  # sublinear data: no curvature to trust
    if a < 0:
        return Prefill(0.0, y2 / s4 / 1e6)
    return Prefill(a / 1000, b / 1e6)


def fit_rates(points: Iterable[tuple[int, float]]) -> Prefill:
    """``fit`` from (tokens, tokens/s) pairs, as kvceph_prefill_tokens_per_s gives them."""
    return fit((n, n / rate) for n, rate in points)


def crossover_tokens(prefill: Prefill, load_seconds_per_token: float) -> float | None:
    """The length above which loading beats prefilling; 0.0 at every length, None never.

    + prefill: the fitted prefill curve
    + load_seconds_per_token: a whole engine's load time per token (warm TTFT / tokens)
    """
    c = load_seconds_per_token
    if c <= prefill.a:
        return 0.0
    if prefill.b <= 0:
        return None
    return (c - prefill.a) / prefill.b


def min_hit_tokens(tokens: float | None, chunk_size: int, max_model_len: int) -> int:
    """``kvceph.min_hit_tokens``: the crossover rounded up to whole chunks (hits are whole
    chunks); a tier that never pays gets the first chunk boundary above max_model_len, so no
    request reads S3.

    + tokens: ``crossover_tokens``
    + chunk_size: LMCache tokens per chunk
    + max_model_len: the longest request
    """
    never = (max_model_len // chunk_size + 1) * chunk_size
    if tokens is None:
        return never
    return min(never, math.ceil(tokens / chunk_size) * chunk_size)


@dataclass(frozen=True)
class Crossover:
    """What lmcache.yaml's ``kvceph.min_hit_tokens`` gets and where that came from."""

    min_hit_tokens: int
    source: str  # a sentence for the plan and verify.py
    # From the figures (before rounding): tokens, or None when the tier never pays.
    estimate: float | None = None

    def describe(self) -> str:
        return f"{self.min_hit_tokens} tokens ({self.source})"


def decide(
    *,
    override: int | None,
    measured: dict | None,
    measured_path: str,
    prefill_points: tuple[tuple[int, float], ...],
    configured_load_s_per_token: float,
    chunk_size: int,
    max_model_len: int,
) -> Crossover:
    """The crossover one cache group renders.

    + override: ``kvceph_min_hit_tokens`` (wins when set)
    + measured: verify.py's figures of the group (``measured.read``), or None
    + measured_path: where those are (or would be) kept, for the sentence
    + prefill_points: configured (tokens, tokens/s)
    + configured_load_s_per_token: the group's KV bytes per token / kvceph_kv_load_gb_per_s
    + chunk_size, max_model_len: the rounding

    Before anything is measured: 0 (never skip). The configured figures only estimate, and a
    crossover above verify.py's document would keep verify from ever measuring the load.
    """
    prefill = fit_rates(prefill_points)
    if override is not None:
        return Crossover(override, "kvceph_min_hit_tokens")
    if measured is None:
        guess = crossover_tokens(prefill, configured_load_s_per_token)
        about = "never pays" if guess is None else f"~{math.ceil(guess)} tokens"
        return Crossover(
            0,
            f"not measured yet: 0 = never skip until verify.py measures this cache group "
            f"into {measured_path}; the configured figures estimate {about}",
            guess,
        )
    tokens, cold, warm = (measured[k] for k in ("prompt_tokens", "cold_ttft_s", "warm_ttft_s"))
    prefill = fit_rates((*prefill_points, (tokens, tokens / cold)))
    estimate = crossover_tokens(prefill, warm / tokens)
    rate = measured["kv_bytes"] / warm / 1e9
    return Crossover(
        min_hit_tokens(estimate, chunk_size, max_model_len),
        f"measured by verify.py run {measured.get('verify_run')} at "
        f"{measured.get('measured_at')}: {tokens} tokens loaded at {rate:.3g} GB/s, cold "
        f"{cold:.2f} s ({measured_path})",
        estimate,
    )


# A new measurement replaces the stored one only when its crossover moves by more than this
# share of the one in use, and by more than NOISE_CHUNKS chunks: warm TTFTs of one document vary
# by ~10 % run to run, and each replacement rolls the cache group.
NOISE_SHARE = 0.10
NOISE_CHUNKS = 2


def worth_replacing(in_use: int, new: int, measured_before: bool, chunk_size: int) -> bool:
    """Whether verify.py stores a new measurement (and so the next deploy rolls the group).

    + in_use: min_hit_tokens the group runs with now
    + new: the one the new figures give
    + measured_before: the group's figures came from an earlier verify.py run
    + chunk_size: LMCache tokens per chunk
    """
    if not measured_before:
        return True
    return abs(new - in_use) > max(NOISE_SHARE * in_use, NOISE_CHUNKS * chunk_size)
