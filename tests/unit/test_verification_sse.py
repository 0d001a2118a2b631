"""TTFT extraction from recorded server-sent-event streams."""

import json

import pytest

from deploys.verification import sse


def _ev(obj) -> str:
    return "data: " + json.dumps(obj)


def _chat(delta, finish=None):
    return _ev({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def _timed(lines, start=100.0, step=0.5):
    return [(start + i * step, line) for i, line in enumerate(lines)]


def test_chat_content_skips_role_and_empty_first_chunks():
    lines = [
        _chat({"role": "assistant", "content": ""}),
        "",
        ": keep-alive",
        _chat({"content": ""}),
        _chat({"content": "Hello"}),
        _chat({"content": " world"}, "length"),
        _ev({"choices": [], "usage": {"prompt_tokens": 1030, "completion_tokens": 2}}),
        "data: [DONE]",
    ]
    r = sse.parse(_timed(lines), t0=99.0)
    # "Hello" is line index 4: arrives at 102.0, sent at 99.0
    assert r.ttft == pytest.approx(3.0)
    assert r.text == "Hello world"
    assert r.prompt_tokens == 1030
    assert r.finish_reason == "length"
    assert r.done


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_delta_is_the_first_token(field):
    lines = [_chat({"role": "assistant"}), _chat({field: "Let me think"}), _chat({"content": "x"})]
    r = sse.parse(_timed(lines, start=10.0, step=1.0), t0=10.0)
    assert r.ttft == pytest.approx(1.0)
    assert r.text.startswith("Let me think")


def test_completions_text_delta_and_bytes_lines():
    lines = [
        b'data: {"choices": [{"text": ""}]}\n',
        b'data: {"choices": [{"text": "42"}]}\r\n',
        b"data: [DONE]\n",
    ]
    r = sse.parse(_timed(lines, start=5.0, step=0.25), t0=5.0)
    assert r.ttft == pytest.approx(0.25)
    assert r.text == "42"
    assert r.prompt_tokens is None


def test_stream_without_tokens_has_no_ttft():
    r = sse.parse(_timed([_chat({"role": "assistant", "content": ""}), "data: [DONE]"]), 0.0)
    assert r.ttft is None and r.events == 1


@pytest.mark.parametrize(
    "event",
    [
        {"error": {"message": "KV load failed for tokens 0-256", "code": 500}},
        {"object": "error", "message": "KV load failed for tokens 0-256"},
    ],
)
def test_error_mid_stream_raises(event):
    lines = [_chat({"content": "a"}), _ev(event)]
    with pytest.raises(sse.StreamError, match="after 1 events: KV load failed"):
        sse.parse(_timed(lines), 0.0)


def test_malformed_event_raises():
    with pytest.raises(sse.StreamError, match="malformed"):
        sse.parse(_timed(["data: {not json"]), 0.0)
