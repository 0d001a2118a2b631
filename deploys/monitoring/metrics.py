"""Prometheus text exposition parsing, and the KV-cache hit counters verify.py reads.

Tolerant: any label set and order, escaped label values, optional timestamps, ``NaN`` and
``+Inf``, counters with or without the ``_total`` suffix (prometheus_client vs older
exporters), several engines (``engine="0"``, ``"1"`` ...) summed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

HIT_SOURCE = ("vllm:prompt_tokens_by_source", {"source": "external_kv_transfer"})
HIT_FALLBACK = ("vllm:external_prefix_cache_hits", {})


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LINE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _labels(text: str) -> dict[str, str]:
    out, pos = {}, 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            if text[pos:].strip(" ,"):
                raise ValueError(f"bad label set {text!r}")
            break
        out[m.group(1)] = re.sub(r"\\[\\\"n]", lambda x: _UNESCAPE[x.group(0)], m.group(2))
        pos = m.end()
    return out


def parse(text: str) -> list[Sample]:
    """Samples of an exposition; lines that do not parse are skipped (exporters vary)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
            labels = _labels(m.group(2) or "")
        except ValueError:
            continue
        samples.append(Sample(m.group(1), labels, value))
    return samples


def total(samples: Iterable[Sample], name: str, **labels: str) -> float | None:
    """Sum of the counter ``name`` (with or without ``_total``) over samples whose labels
    include ``labels``; None when no sample matches (the metric is absent)."""
    names = {name, name + "_total"} if not name.endswith("_total") else {name, name[:-6]}
    found = None
    for s in samples:
        if s.name in names and all(s.labels.get(k) == v for k, v in labels.items()):
            found = (found or 0.0) + s.value
    return found


@dataclass(frozen=True)
class HitCounter:
    metric: str  # which counter was read, for the report
    value: float


def hit_tokens(samples: list[Sample]) -> HitCounter | None:
    """Prompt tokens whose KV came through the KV connector so far (None: no such metric)."""
    for name, labels in (HIT_SOURCE, HIT_FALLBACK):
        value = total(samples, name, **labels)
        if value is not None:
            shown = name + "".join(f'{{{k}="{v}"}}' for k, v in labels.items())
            return HitCounter(shown, value)
    return None


def hit_delta(before: list[Sample], after: list[Sample]) -> tuple[str | None, float | None]:
    """Hit tokens between two scrapes of the same process: (metric, delta) or (None, None)."""
    a, b = hit_tokens(before), hit_tokens(after)
    if a is None or b is None or a.metric != b.metric:
        return (b or a).metric if (b or a) else None, None
    return b.metric, max(0.0, b.value - a.value)
