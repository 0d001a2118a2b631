"""PURE: vllm-router 0.1.17's own answers as kvceph reads them (status.py's RouterAnswers fact,
verify.py's router step), one parser for both; tests/facts/status.RouterAnswers holds recorded
answers of the real router."""

from __future__ import annotations

import json


def workers(text: str) -> list[dict]:
    """``GET /workers``: ``[{"url", "healthy", "load"}]`` in the router's order; ValueError
    (one line) when the answer is not vllm-router's worker list.

    vllm-router 0.1.17 answers ``{"workers": [{"url": ..., "is_healthy": true, "load": 0,
    ...}], "total": N, "stats": {...}}``."""
    try:
        found = json.loads(text)["workers"]
        return [
            {"url": w["url"], "healthy": bool(w["is_healthy"]), "load": w.get("load")}
            for w in found
        ]
    except (ValueError, KeyError, TypeError):
        short = " ".join(str(text).split())[:120]
        raise ValueError(f"/workers: not vllm-router's worker list: {short!r}") from None
