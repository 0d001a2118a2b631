"""The answer check: every step that serves the run's document from a cache tier must generate
the cold answer, token for token.

The KV an engine loads is right only if its answer is: a wrong, stale or partial load (LMCache
#4463's packed K|V layout, a body altered in the bucket) still counts as a hit and still comes
fast, but changes the greedy output. So each request asks for a greedy answer (temperature 0,
a fixed seed, at least :data:`MIN_TOKENS` tokens, EOS ignored so every answer is as long) and
its token ids; a step whose ids differ from the cold request's FAILS naming the tier, the host
and the first differing position. Dummy weights are deterministic too: the check works on the
H200 runs without real weights.

Token ids, not text: two token sequences can detokenize to the same text. They come from
``logprobs`` with ``return_tokens_as_token_ids`` (each token named ``token_id:<id>``): vLLM's
OpenAI server has taken both on chat and completions requests, streamed or not, since 2024
(v0.5, ``ChatCompletionRequest.return_tokens_as_token_ids``), so 0.25.1 and 0.34 alike; the lab
engine answers them as vLLM does. vLLM's newer ``return_token_ids`` (a ``token_ids`` list per
choice) is read too where an engine sends it (sse.event_token_ids).
"""

from __future__ import annotations

from collections.abc import Sequence

from deploys.verification.verdicts import FAIL, Verdict

MIN_TOKENS = 16  # the shortest answer compared (kvceph_verify_output_tokens below it is raised)
SEED = 0  # greedy already; a fixed seed leaves nothing to chance should sampling be on
# Where each step's KV comes from (report.STEP_TIERS names the same tiers on the chart).
TIERS = {
    "dram": "node DRAM",
    "warm": "S3 after restart",
    "cross-node": "S3, another node",
    "cross-engine": "S3, another engine of the host",
    "fallback": "recompute, objects deleted",
    "router": "the router's repeat",
}
CAUSE_WRONG_KV = (
    "the KV it used is not the KV the cold request computed: an engine/LMCache pair that "
    "loads KV in another layout (LMCache #4463: vLLM 0.26/0.33 with LMCache 0.5.6), or an "
    "object altered in the bucket with the GET crc32c check off (kvceph_connector_verify_crc32c)"
)


def request_fields(output_tokens: int) -> dict:
    """The fields of a chat completion request that make its answer comparable.

    + output_tokens: kvceph_verify_output_tokens (raised to MIN_TOKENS)
    """
    return {
        "max_tokens": max(output_tokens, MIN_TOKENS),
        "temperature": 0,
        "seed": SEED,
        "ignore_eos": True,  # vLLM's sampling extra: every answer max_tokens long
        "logprobs": True,
        "return_tokens_as_token_ids": True,
    }


def first_difference(cold: Sequence[int], got: Sequence[int]) -> int | None:
    """The first position where two answers differ (a shorter one differs where it ends);
    None when they are equal."""
    for i, (a, b) in enumerate(zip(cold, got, strict=False)):
        if a != b:
            return i
    return None if len(cold) == len(got) else min(len(cold), len(got))


def unusable(ids: Sequence[int] | None) -> str | None:
    """Why a cold answer cannot be compared with, or None."""
    if ids is None:
        return (
            "the answer carried no token ids (logprobs with return_tokens_as_token_ids): the "
            "engine's OpenAI server does not return them, so no answer can be compared"
        )
    if len(ids) < MIN_TOKENS:
        return (
            f"the answer has {len(ids)} tokens, fewer than the {MIN_TOKENS} compared (the engine "
            "ignored max_tokens or ignore_eos)"
        )
    return None


def compare(
    cold: Sequence[int], got: Sequence[int] | None, step: str, host: str
) -> tuple[Verdict | None, dict]:
    """(a FAIL naming tier, host and the first differing position, or None when the answers
    are equal; the figures for the report).

    + cold: the cold answer's token ids. + got: this step's (None: none returned).
    + step: the step (its tier, TIERS). + host: the engine that answered.
    """
    tier = TIERS.get(step, step)
    figures: dict = {"tier": tier, "host": host, "tokens": len(cold), "equal": False}
    if got is None:
        figures["first_difference"] = 0
        why = f"{host} ({tier}) returned no token ids: its answer cannot be compared with cold"
        return Verdict(FAIL, why), figures
    at = first_difference(cold, got)
    figures["first_difference"] = at
    if at is None:
        figures["equal"] = True
        return None, figures
    want = cold[at] if at < len(cold) else None
    have = got[at] if at < len(got) else None
    figures |= {"cold_token": want, "token": have}
    shown = "none" if have is None else have
    return (
        Verdict(
            FAIL,
            f"wrong answer from {tier} on {host}: first differing token at position {at} of "
            f"{len(cold)} (cold {'none' if want is None else want}, {host} {shown}): "
            + CAUSE_WRONG_KV,
        ),
        figures,
    )


def judged(verdict: Verdict, wrong: Verdict | None) -> Verdict:
    """The step's verdict with its answer check: a wrong answer fails the step, whatever its
    hit; a failure of the hit is kept after it."""
    if wrong is None:
        return verdict
    if verdict.failed:
        return Verdict(FAIL, f"{wrong.message}; and: {verdict.message}")
    return wrong
