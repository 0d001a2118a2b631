"""Time to first token from an OpenAI-style server-sent-event stream.

TTFT is the time from sending the request to the first event that carries a non-empty
``content``, ``reasoning_content``/``reasoning`` or ``text`` delta, as LMCache's long_doc_qa
measures it: role-only and empty first chunks do not count. The generated token ids come from
each event's logprobs with ``return_tokens_as_token_ids`` (answer.py says why those).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass


class StreamError(RuntimeError):
    """The server reported an error inside the stream, or the stream is malformed."""


@dataclass(frozen=True)
class StreamResult:
    ttft: float | None  # seconds; None when no token arrived
    text: str
    usage: dict | None  # the last ``usage`` object seen (stream_options.include_usage)
    finish_reason: str | None
    events: int
    done: bool  # ``data: [DONE]`` was seen
    token_ids: tuple[int, ...] | None = None  # the generated ids; None: no event carried any

    @property
    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None


_DELTA_FIELDS = ("content", "reasoning_content", "reasoning")


def event_text(event: dict) -> str:
    """The generated text one event carries (chat delta or completions text)."""
    out = []
    for choice in event.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            out.extend(delta[f] for f in _DELTA_FIELDS if isinstance(delta.get(f), str))
        if isinstance(choice.get("text"), str):
            out.append(choice["text"])
    return "".join(out)


TOKEN_ID = "token_id:"  # vLLM's name of a token with return_tokens_as_token_ids


def _token_id(name) -> int | None:
    if isinstance(name, str) and name.startswith(TOKEN_ID):
        try:
            return int(name[len(TOKEN_ID) :])
        except ValueError:
            return None
    return None


def event_token_ids(event: dict) -> list[int] | None:
    """The generated token ids one event carries: vLLM's ``token_ids`` (return_token_ids), else
    its logprobs' ``token_id:<id>`` names (chat ``content[].token``, completions ``tokens``);
    None when it carries none (a role-only or usage event)."""
    out: list[int] | None = None
    for choice in event.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
            out = (out or []) + ids
            continue
        lp = choice.get("logprobs")
        if not isinstance(lp, dict):
            continue
        if isinstance(lp.get("content"), list):
            names = [x.get("token") for x in lp["content"] if isinstance(x, dict)]
        else:
            names = lp.get("tokens") if isinstance(lp.get("tokens"), list) else []
        parsed = [_token_id(n) for n in names]
        if parsed and None not in parsed:
            out = (out or []) + parsed
    return out


def _error_message(event: dict) -> str | None:
    err = event.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    if isinstance(err, str):
        return err
    if event.get("object") == "error":
        return str(event.get("message") or event)
    return None


def parse(timed_lines: Iterable[tuple[float, str | bytes]], t0: float) -> StreamResult:
    """Read ``(arrival time, line)`` pairs; raise StreamError on an error event.

    + timed_lines: lines of the response body with the clock reading when each arrived
    + t0: the clock reading when the request was sent (same clock)
    """
    ttft = None
    text: list[str] = []
    usage = finish = None
    events = 0
    done = False
    ids: list[int] | None = None
    for at, raw in timed_lines:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if not line.startswith("data:"):
            continue  # blank separators, ": keep-alive" comments, event:/id: fields
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        try:
            event = json.loads(payload)
        except ValueError:
            raise StreamError(f"malformed event after {events} events: {payload[:80]!r}") from None
        if not isinstance(event, dict):
            raise StreamError(f"unexpected event after {events} events: {payload[:80]!r}")
        message = _error_message(event)
        if message is not None:
            raise StreamError(f"server error after {events} events: {message}")
        events += 1
        piece = event_text(event)
        if piece and ttft is None:
            ttft = max(0.0, at - t0)
        text.append(piece)
        got = event_token_ids(event)
        if got is not None:
            ids = (ids or []) + got
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and choice.get("finish_reason"):
                finish = choice["finish_reason"]
    return StreamResult(
        ttft, "".join(text), usage, finish, events, done, None if ids is None else tuple(ids)
    )
