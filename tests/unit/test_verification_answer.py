"""The answer check: the first differing position, the verdict naming tier and host, the
request fields, and token ids read from vLLM's stream (recorded shapes of its OpenAI server
with logprobs and return_tokens_as_token_ids, and of return_token_ids)."""

from __future__ import annotations

import json
from pathlib import Path

from deploys.verification import answer, sse, verdicts

COLD = tuple(range(1000, 1032))


def test_first_difference():
    assert answer.first_difference(COLD, COLD) is None
    assert answer.first_difference(COLD, COLD[:7] + (1,) + COLD[8:]) == 7
    assert answer.first_difference(COLD, (9,) + COLD[1:]) == 0
    assert answer.first_difference(COLD, COLD[:20]) == 20  # shorter: it differs where it ends
    assert answer.first_difference(COLD[:20], COLD) == 20


def test_compare_names_tier_host_and_position():
    assert answer.compare(COLD, COLD, "warm", "gpu1") == (
        None,
        {"tier": "S3 after restart", "host": "gpu1", "tokens": 32, "equal": True,
         "first_difference": None},
    )  # fmt: skip
    wrong, figures = answer.compare(COLD, COLD[:9] + (5,) + COLD[10:], "cross-node", "gpu2")
    assert wrong.status == verdicts.FAIL
    assert wrong.message.startswith(
        "wrong answer from S3, another node on gpu2: first differing token at position 9 of 32 "
        "(cold 1009, gpu2 5): the KV it used is not the KV the cold request computed"
    )
    assert figures == {"tier": "S3, another node", "host": "gpu2", "tokens": 32, "equal": False,
                       "first_difference": 9, "cold_token": 1009, "token": 5}  # fmt: skip
    short, _ = answer.compare(COLD, COLD[:3], "dram", "gpu1")
    assert (
        "node DRAM on gpu1: first differing token at position 3 of 32 (cold 1003, gpu1 none)"
        in (short.message)
    )
    none, figures = answer.compare(COLD, None, "fallback", "gpu1")
    assert "returned no token ids" in none.message and figures["first_difference"] == 0


def test_a_wrong_answer_fails_the_step_and_keeps_its_hit_failure():
    ok = verdicts.Verdict(verdicts.PASS, "1024 tokens loaded")
    warn = verdicts.Verdict(verdicts.WARN, "slower than recompute")
    bad = verdicts.Verdict(verdicts.FAIL, "partial hit")
    wrong, _ = answer.compare(COLD, COLD[1:], "warm", "gpu1")
    assert answer.judged(ok, None) is ok and answer.judged(warn, None) is warn
    assert answer.judged(warn, wrong) == wrong
    assert answer.judged(bad, wrong).message == f"{wrong.message}; and: partial hit"


def test_request_fields_are_greedy_seeded_long_enough_and_ask_for_ids():
    fields = answer.request_fields(8)
    assert fields == {"max_tokens": 16, "temperature": 0, "seed": 0, "ignore_eos": True,
                      "logprobs": True, "return_tokens_as_token_ids": True}  # fmt: skip
    assert answer.request_fields(32)["max_tokens"] == 32


def test_unusable_cold_answers():
    assert answer.unusable(COLD) is None
    assert "no token ids" in answer.unusable(None)
    assert "has 4 tokens, fewer than the 16" in answer.unusable(COLD[:4])


def _lines(events):
    return [(0.1 * i, f"data: {e if isinstance(e, str) else json.dumps(e)}\n")
            for i, e in enumerate(events)]  # fmt: skip


# vLLM's chat stream with "logprobs": true, "return_tokens_as_token_ids": true (the shape of
# ChatCompletionStreamResponse in 0.25.1 and 0.34: a role chunk, one chunk per token with
# logprobs.content, a usage chunk with empty choices).
CHAT = [
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}]},
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"content": "The"}, "logprobs": {"content": [
         {"token": "token_id:785", "logprob": -0.31, "bytes": [84, 104, 101],
          "top_logprobs": []}]}, "finish_reason": None}]},
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"content": " cat"}, "logprobs": {"content": [
         {"token": "token_id:8251", "logprob": -1.2, "bytes": [32, 99, 97, 116],
          "top_logprobs": []}]}, "finish_reason": "length", "stop_reason": None}]},
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [], "usage": {"prompt_tokens": 5, "total_tokens": 7, "completion_tokens": 2}},
    "[DONE]",
]  # fmt: skip


def test_token_ids_from_vllms_chat_stream():
    got = sse.parse(_lines(CHAT), 0.0)
    assert got.token_ids == (785, 8251) and got.text == "The cat" and got.prompt_tokens == 5


def test_token_ids_from_completions_logprobs_and_return_token_ids():
    completions = [
        {"choices": [{"index": 0, "text": " a", "logprobs": {"text_offset": [0],
         "token_logprobs": [-0.1], "tokens": ["token_id:64"], "top_logprobs": [{}]}}]},
        {"choices": [{"index": 0, "text": " b", "token_ids": [65], "logprobs": None}]},
        "[DONE]",
    ]  # fmt: skip
    assert sse.parse(_lines(completions), 0.0).token_ids == (64, 65)


def test_a_stream_without_ids_has_none():
    plain = [{"choices": [{"delta": {"content": "x"}, "logprobs": None}]}, "[DONE]"]
    assert sse.parse(_lines(plain), 0.0).token_ids is None
    # text names (no return_tokens_as_token_ids) are not ids
    named = [{"choices": [{"delta": {"content": "x"},
              "logprobs": {"content": [{"token": "x", "logprob": 0.0}]}}]}, "[DONE]"]  # fmt: skip
    assert sse.parse(_lines(named), 0.0).token_ids is None


def test_refused_bodies_explain_a_short_hit_as_a_warning():
    v = verdicts.warm(hit=512, expected_hit=1024, metric="m", warm_ttft=0.1, cold_ttft=1.0,
                      ratio=0.5, kv_bytes=1, objects=8, refused=True)  # fmt: skip
    assert v.status == verdicts.WARN and v.message.startswith("512 of 1024 tokens loaded (m)")
    assert verdicts.LOG_CHECKSUM in v.message
    v = verdicts.cross_node(hit=0, expected_hit=1024, metric="m", writer="gpu1", ttft=0.1,
                            cold_ttft=1.0, refused=True)  # fmt: skip
    assert v.status == verdicts.WARN
    # No refusal: a short hit still fails.
    v = verdicts.warm(hit=512, expected_hit=1024, metric="m", warm_ttft=0.1, cold_ttft=1.0,
                      ratio=0.5, kv_bytes=1, objects=8, refused=False)  # fmt: skip
    assert v.status == verdicts.FAIL


# Recorded on the H200 (hw/h200/realmodel.py check: real weights, greedy, logprobs with
# return_tokens_as_token_ids; cold, then the KV loaded from S3): vLLM 0.25.1's answers equal,
# vLLM 0.33.0's (LMCache 0.5.6, the packed K|V layout) not.
RESULTS = Path(__file__).resolve().parents[2] / "hw" / "h200" / "results"


def _recorded(path: str) -> list[dict]:
    return [json.loads(x) for x in (RESULTS / path).read_text().splitlines() if x.strip()]


def _as_stream(tokens: list[str]) -> list:
    """The recorded answer as vLLM's completions stream sends it: one token per event."""
    events = [{"choices": [{"index": 0, "text": "x", "logprobs": {"text_offset": [0],
               "token_logprobs": [-0.1], "tokens": [t], "top_logprobs": None}}]}
              for t in tokens]  # fmt: skip
    return [*events, "[DONE]"]


def test_recorded_h200_answers_vllm_025_equal_and_033_caught_at_token_0():
    for row in _recorded("2026-12-04-v025/real.jsonl"):
        cold = sse.parse(_lines(_as_stream(row["cold"]["tokens"])), 0.0).token_ids
        warm = sse.parse(_lines(_as_stream(row["warm"]["tokens"])), 0.0).token_ids
        assert answer.unusable(cold) is None and len(cold) == 48
        assert answer.compare(cold, warm, "warm", "h200")[0] is None
    for row in _recorded("2026-12-03-pair/real-fallback-continuation.jsonl"):
        cold = sse.parse(_lines(_as_stream(row["cold"]["tokens"])), 0.0).token_ids
        warm = sse.parse(_lines(_as_stream(row["warm"]["tokens"])), 0.0).token_ids
        wrong, figures = answer.compare(cold, warm, "warm", "h200")
        assert wrong.failed and figures["first_difference"] == 0
        assert "on h200: first differing token at position 0 of 48" in wrong.message


def test_a_one_token_answer_is_no_proof_ignore_eos_is_why():
    # vLLM 0.33.0 with wrong KV, a bare question: cold and warm both answered the end token at
    # once, "equal"; the check needs 16 tokens (ignore_eos makes every answer max_tokens long).
    for row in _recorded("2026-12-03-pair/real-fallback-question.jsonl"):
        cold = sse.parse(_lines(_as_stream(row["cold"]["tokens"])), 0.0).token_ids
        assert cold == (2,) and "has 1 tokens, fewer than the 16" in answer.unusable(cold)
    assert answer.request_fields(32)["ignore_eos"] is True


def test_the_refusal_line_is_the_connectors_own():
    from kvceph_connector import s3core

    assert verdicts.LOG_CHECKSUM == s3core.REFUSED_LINE
