"""Will the cache pay? Break-even bandwidth and verdicts from a host's measured S3 figures.

Pure functions. A prompt of L tokens is worth loading when LMCache brings its KV back before
the engine would have recomputed it:

    load(L)     = chunks(L) x HEAD latency          (LMCache looks chunks up one by one)
                + KV bytes(L) / measured GET GB/s   (then fetches them all at once)
    prefill(L)  = L / prefill rate
    break-even  = KV bytes(L) / (prefill(L) - chunks(L) x HEAD latency)

KV bytes(L) = full chunks of L x chunk_size x KV bytes per token per worker x TP: the sizes
come from deploys/tier/kv_sizing.py, the same derivation the LMCache config uses.

Verdict from measured GET GB/s / break-even: at least ``PAYS_MARGIN`` pays; within
``1 / PAYS_MARGIN`` of it is marginal (a few percent of bandwidth decide, and the probe's own
noise is that large); below that the cache is slower than recomputing.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

PROMPT_TOKENS = (8192, 32768, 131072)
PAYS_MARGIN = 1.2
PAYS, MARGINAL, SLOWER = "pays", "marginal", "slower than recompute"


@dataclass(frozen=True)
class Shape:
    """What one host's LMCache objects look like."""

    chunk_size: int  # tokens per chunk
    kv_bytes_per_token: int  # per worker
    tensor_parallel_size: int

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_size * self.kv_bytes_per_token

    def chunks(self, tokens: int) -> int:
        """Full chunks of a prompt (LMCache's S3 connector stores no partial chunk)."""
        return tokens // self.chunk_size

    def kv_bytes(self, tokens: int) -> int:
        """KV bytes the host loads for a prompt, all workers together."""
        return self.chunks(tokens) * self.chunk_bytes * self.tensor_parallel_size


@dataclass(frozen=True)
class Measured:
    """What the probe measured on one host (medians of its rounds)."""

    up_gb_per_s: float
    down_gb_per_s: float
    head_seconds: float


@dataclass(frozen=True)
class PromptVerdict:
    tokens: int
    kv_bytes: int
    prefill_seconds: float
    load_seconds: float
    break_even_gb_per_s: float  # math.inf when the lookups alone outlast the prefill
    verdict: str


def break_even(shape: Shape, tokens: int, prefill_tokens_per_s: float, head_seconds: float):
    """GB/s the host must load at for a ``tokens`` prompt to come back as fast as prefill."""
    prefill = tokens / prefill_tokens_per_s
    spare = prefill - shape.chunks(tokens) * head_seconds
    if spare <= 0:
        return math.inf
    return shape.kv_bytes(tokens) / spare / 1e9


def verdict(measured_gb_per_s: float, break_even_gb_per_s: float) -> str:
    """pays / marginal / slower than recompute, with a ``PAYS_MARGIN`` band around break-even."""
    if math.isinf(break_even_gb_per_s):
        return SLOWER
    ratio = measured_gb_per_s / break_even_gb_per_s
    if ratio >= PAYS_MARGIN:
        return PAYS
    if ratio >= 1 / PAYS_MARGIN:
        return MARGINAL
    return SLOWER


def judge(
    shape: Shape,
    measured: Measured,
    prefill_tokens_per_s: float,
    prompts: tuple[int, ...] = PROMPT_TOKENS,
) -> list[PromptVerdict]:
    """One verdict per prompt length."""
    out = []
    for tokens in prompts:
        be = break_even(shape, tokens, prefill_tokens_per_s, measured.head_seconds)
        kv = shape.kv_bytes(tokens)
        load = shape.chunks(tokens) * measured.head_seconds + kv / (measured.down_gb_per_s * 1e9)
        out.append(
            PromptVerdict(
                tokens=tokens,
                kv_bytes=kv,
                prefill_seconds=tokens / prefill_tokens_per_s,
                load_seconds=load,
                break_even_gb_per_s=be,
                verdict=verdict(measured.down_gb_per_s, be),
            )
        )
    return out


def summarize(raw: dict) -> Measured:
    """Medians of the remote probe's rounds (deploys/remote/s3probe.py's JSON)."""
    return Measured(
        up_gb_per_s=statistics.median(raw["up_gb_per_s"]),
        down_gb_per_s=statistics.median(raw["down_gb_per_s"]),
        head_seconds=float(raw["head_seconds_median"]),
    )


def overall(verdicts: list[PromptVerdict]) -> str:
    """One line: the verdict per prompt length, e.g. '8k pays, 32k pays, 128k marginal'."""
    return ", ".join(f"{v.tokens // 1024}k {v.verdict}" for v in verdicts)
