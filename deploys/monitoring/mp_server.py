"""LMCache's MP server as status.py shows it: a summary of its ``/status`` JSON and ``/metrics``
text (LMCache 0.5.6 ``lmcache server``, recorded in tests/fixtures/mp_server/). Pure module."""

from __future__ import annotations

import re

# Prometheus sample lines: name{labels} value. Only LMCache's own (lmcache_mp_*) are kept.
_SAMPLE = re.compile(r"^(lmcache_mp_[A-Za-z0-9_]+)(\{[^}]*\})?\s+(\S+)")
# The per-tier hit counters: tokens of a lookup's hit L1 could serve / L2 added (LMCache 0.5.6
# lmcache/v1/mp_observability/subscribers/metrics/lookup.py, OTel "lmcache_mp.lookup_hit_l1"
# with unit "tokens": the exporter writes '.' -> '_', the unit and '_total', as the module's own
# docstring and the recorded gauges' "_bytes" show). Not in the idle recording: read if present.
L1_HITS = "lmcache_mp_lookup_hit_l1_tokens_total"
L2_HITS = "lmcache_mp_lookup_hit_l2_tokens_total"


def metric_sums(text: str) -> dict[str, float]:
    """Each lmcache_mp_* metric summed over its labels.

    + text: the /metrics answer
    """
    out: dict[str, float] = {}
    for line in (text or "").splitlines():
        m = _SAMPLE.match(line)
        if m:
            try:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                continue
    return out


def summary(status: dict | None, metrics_text: str | None) -> dict:
    """What status.py shows of one server: healthy, L1 used/total bytes, its L2 adapters
    (type, healthy, disabled), registered GPU workers and the per-tier hits where exported.

    + status: the /status JSON (None: no answer). + metrics_text: the /metrics text or None.
    """
    if not isinstance(status, dict):
        return {"healthy": None, "error": "no /status answer"}
    sm = status.get("storage_manager") or {}
    used, total = (sm.get("l1_usage") or [None, None])[:2]
    adapters = [
        {
            "type": a.get("type"),
            "healthy": bool(a.get("is_healthy")),
            # Only the stock s3 adapter reports it: its breaker after 3 errors (PR #4368).
            "disabled": bool(a.get("connection_disabled", False)),
        }
        for a in sm.get("l2_adapters") or []
    ]
    sums = metric_sums(metrics_text) if metrics_text is not None else None
    return {
        "healthy": bool(status.get("is_healthy")) and bool(sm.get("is_healthy", True)),
        "l1_used_bytes": used,
        "l1_total_bytes": total,
        "l2": adapters,
        "workers": len(status.get("registered_gpu_ids") or []),
        "l1_hits": None if sums is None else sums.get(L1_HITS),
        "l2_hits": None if sums is None else sums.get(L2_HITS),
        "error": None,
    }


def line(host: str, s: dict) -> str:
    """One status line for a host's server.

    + host: the inventory name. + s: :func:`summary`'s answer
    """
    if s.get("healthy") is None:
        return f"{host}: LMCache MP server: {s.get('error') or 'no answer'}"
    gib = 1 << 30
    l2 = ", ".join(
        f"{a['type']} {'ok' if a['healthy'] and not a['disabled'] else 'OFF'}" for a in s["l2"]
    )
    used, total = s.get("l1_used_bytes"), s.get("l1_total_bytes")
    l1 = f"{used / gib:.2f}/{total / gib:.2f} GiB" if used is not None and total else "?"
    hits = "" if s.get("l1_hits") is None else f", hits L1 {s['l1_hits']:g}"
    hits += "" if s.get("l2_hits") is None else f" L2 {s['l2_hits']:g}"
    return (
        f"{host}: LMCache MP server {'healthy' if s['healthy'] else 'UNHEALTHY'}, L1 {l1}, "
        f"L2 {l2 or 'none'}, {s['workers']} registered workers{hits}"
    )


def problems(servers: dict[str, dict]) -> list[str]:
    """status.py's PARTIAL reasons: a server that did not answer, is unhealthy, or has an L2
    adapter off.

    + servers: host -> :func:`summary`'s answer
    """
    out = []
    for h, s in sorted(servers.items()):
        if s.get("healthy") is None:
            out.append(f"{h}: LMCache MP server did not answer ({s.get('error')})")
        elif not s["healthy"]:
            out.append(f"{h}: LMCache MP server unhealthy (/status is_healthy false)")
        for a in s.get("l2") or ():
            if not a["healthy"] or a["disabled"]:
                out.append(f"{h}: LMCache MP server's L2 {a['type']} is off: KV is not saved to S3")
    return out
