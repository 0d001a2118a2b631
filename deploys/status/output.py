"""status.py's three outputs from one document: a table on stdout, JSON, a PNG chart.

matplotlib is optional (``pip install 'kvceph[report]'``): without it the chart is skipped
with a notice, as verify.py's is.
"""

from __future__ import annotations

import json
from pathlib import Path

from deploys.monitoring import mp_server, tiers
from deploys.status.document import summary_line
from deploys.status.reports import age
from deploys.tier import remote_tier


def _n(v, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


def _size(b) -> str:
    if b is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"


def _digest(d) -> str:
    return d[:12] if d else "-"


def _grid(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head) - 1)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + str(r[-1])
        for r in [head, *rows]
    ]
    lines.insert(1, "-" * min(160, len(lines[0])))
    return lines


def _drift_text(r: dict) -> str:
    if not r["drift"]:
        return "none"
    named = [
        f"{s['field']} {s['running']} -> {s['desired']}"
        + (f" ({s['setting']})" if s.get("setting") else "")
        if s["running"] is not None or s["desired"] is not None
        else s["field"]
        for s in r["drift_settings"]
    ]
    return "DRIFT: " + "; ".join(named or r["drift_reasons"])


def engine_table(doc: dict) -> list[str]:
    head = ["host", "unit", "state", "since", "vLLM", "LMCache", "digest", "health", "requests"]
    head += ["LMCache hits/queried", "hit %", "loaded", "saved GPU s", "drift"]
    rows = []
    for r in doc["engines"]:
        if not r["reachable"]:
            rows.append([r["host"], r["unit"]] + ["-"] * (len(head) - 3) + [r["error"].upper()])
            continue
        vllm = r["vllm"] or "?"
        if r.get("lab_engine"):
            vllm += f" (lab {r['lab_engine']})"
        ratio = r.get("hit_ratio")
        rows.append(
            [
                r["host"],
                r["unit"],
                f"{r['active']}/{r['sub_state']}",
                r["since"] or "-",
                vllm,
                r["lmcache"] or "-",
                _digest(r["running_digest"]),
                _n(r["health"], "d") if isinstance(r["health"], int) else "-",
                _n(r.get("requests")),
                f"{_n(r.get('external_hits'))}/{_n(r.get('external_queries'))}",
                "-" if ratio is None else f"{ratio:.1%}",
                _n(r.get("loaded_tokens")),
                _n(r.get("saved_gpu_seconds"), ".2f"),
                _drift_text(r),
            ]
        )
    return _grid(head, rows)


def group_lines(groups: list[dict]) -> list[str]:
    """One line per cache group: its bytes against its share, fill rate, days to full."""
    out = []
    for g in groups:
        rate = g.get("fill_rate")
        days = g.get("days_to_full")
        fill = (
            "fill rate unmeasured (one trim so far)"
            if rate is None
            else f"fills {_size(rate)}/s, "
            + ("not growing" if days is None else f"full in {days:.1f} d without the trim")
        )
        used = f" ({g['share_used']:.0%})" if g.get("share_used") is not None else ""
        out.append(
            f"  group {g['prefix']}: {_size(g['bytes'])} of its {_size(g['share_bytes'])} "
            f"share{used}, {fill}; last trim deleted {g['deleted']} objects"
        )
    return out


def cluster_lines(doc: dict) -> list[str]:
    c = doc["cluster"]
    if c is None:
        return []
    if not c["reachable"]:
        return [f"cluster ({c['host']}): {c['error'].upper()}"]
    quota = (
        f"{_size(c['bytes'])} of {_size(c['quota_bytes'])} quota ({c['quota_used']:.1%}, "
        f"{c['quota_source']})"
        if c.get("quota_bytes") and c.get("bytes") is not None
        else f"{_size(c.get('bytes'))}, no quota"
    )
    if c.get("quota_full"):
        since = c.get("quota_full_since")
        quota += (
            f", quota full{f' since {since}' if since else ''} (RGW refuses new chunks; "
            "engines recompute what they cannot store)"
        )
    rule = (
        f"rule {c['lifecycle_rule']} present, expires after {c['lifecycle_expiration_days']} d"
        if c.get("lifecycle_present")
        else f"rule {c['lifecycle_rule']} MISSING"
        if c.get("lifecycle_present") is False
        else "lifecycle unread"
    )
    daemons = c.get("rgw_daemons")
    where = ", ".join(f"{k} on {v['hostname']}" for k, v in (daemons or {}).items())
    rgw = "unread" if daemons is None else f"{len(daemons)} up ({where})" if daemons else "NONE up"
    mon = "ok: " + (c.get("mon_health") or "") if c.get("mon") else "NO ANSWER"
    lines = [
        f"cluster ({c['host']}): mon {mon}",
        f"  bucket {c['bucket']}: {_n(c.get('objects'))} objects, {quota}; lifecycle {rule}",
        f"  RGW daemons (service map, managed by {c['rgw_managed_by']}): {rgw}",
        f"  S3 endpoint {c['endpoint']}: "
        + ("answers" if c.get("endpoint_reachable") else "NOT ANSWERING")
        + (f" (HTTP {c['endpoint_status']})" if c.get("endpoint_status") else ""),
    ]
    lines += group_lines(c.get("groups") or [])
    if "services" in c:
        lines.append(f"  orchestrator: {c.get('orchestrator')}")
        for name, s in c["services"].items():
            extra = f", concentrator {s['concentrator']}" if s.get("concentrator") else ""
            lines.append(f"  service {name}: {s['running']}/{s['size']} running{extra}")
    return lines


def report_lines(doc: dict) -> list[str]:
    v = doc["verify"]
    lines = [
        f"last verify.py: {v['verdict']}"
        + (f", run {v['run']}, {age(v['age_s'])} ago" if v.get("run") else "")
        + (f"; failed: {'; '.join(v['failures'])}" if v.get("failures") else "")
    ]
    probes = doc["probes"]
    for host in doc["inference_hosts"]:
        p = probes.get(host)
        if p is None:
            lines.append(f"last probe.py {host}: never run")
            continue
        verdict = f"ERROR {p['error']}" if p.get("error") else p.get("verdict")
        if p.get("engine_verdict"):
            verdict += f"; at the engine's load rate: {p['engine_verdict']}"
        lines.append(f"last probe.py {host}: {verdict} (run {p['run']}, {age(p['age_s'])} ago)")
    return lines


def crash_loop_stopped(r: dict) -> bool:
    """Whether systemd gave up restarting the engine. With Restart=always a unit stays failed
    only at its start limit: ``Result=start-limit-hit`` where systemd says so, while systemd
    252 (Debian 12) keeps the last exit's result ("Start request repeated too quickly" in the
    journal) and the unit failed after automatic restarts."""
    if r.get("result") == "start-limit-hit":
        return True
    return r.get("active") == "failed" and bool(r.get("restarts"))


def crash_lines(doc: dict) -> list[str]:
    """One line per engine that systemd keeps restarting or gave up on (its start limit)."""
    lines = []
    for r in doc["engines"]:
        if not r["reachable"]:
            continue
        where = f"{r['host']} {r['unit']}"
        fix = f"fix: journalctl -u {r['unit']} on {r['host']}"
        if crash_loop_stopped(r):
            lines.append(
                f"CRASH LOOP {where}: systemd stopped restarting it at its start limit "
                f"({r.get('restarts') or 0} restarts, last result {r.get('result')}); {fix}, "
                "then rerun the deploy (it resets the limit)"
            )
        elif r.get("restarts"):
            lines.append(
                f"RESTARTED {where}: {r['restarts']} automatic restart(s) since kvceph or an "
                f"operator last started it (the engine died); {fix}"
            )
    return lines


def s3_off_lines(doc: dict) -> list[str]:
    """One line per engine whose LMCache turned S3 off in this start (remote_tier.S3_DISABLED)."""
    return [
        f"S3 OFF {r['host']} {r['unit']} since {remote_tier.shown_time(r['s3_disabled_at'])}: "
        "LMCache disabled its S3 connection after connection errors; it recomputes every "
        "request until restarted; the next deploy restarts it in its roll once the S3 "
        "endpoint answers"
        for r in doc["engines"]
        if r["reachable"] and r.get("s3_disabled_at")
    ]


def puts_skipped_lines(doc: dict) -> list[str]:
    """One line per engine with kvceph_skip_short_puts: the connector's own count."""
    out = []
    for r in doc["engines"]:
        p = r.get("puts_skipped")
        if not r["reachable"] or p is None:
            continue
        head = f"puts skipped {r['host']} {r['unit']} (kvceph_skip_short_puts)"
        if not p["at"]:
            out.append(f"{head}: none logged since the engine started")
            continue
        out.append(
            f"{head}: {p['skipped']} chunks seen only below the crossover not written, "
            f"{p['stored']} written (the connector's count at "
            f"{remote_tier.shown_time(p['at'])}; it logs at most once a minute)"
        )
    return out


def crc32c_lines(doc: dict) -> list[str]:
    """One line per engine whose connector refused GET bodies on their crc32c in this start."""
    out = []
    for r in doc["engines"]:
        c = r.get("crc32c_refused")
        if not r["reachable"] or not c or not c["refused"]:
            continue
        out.append(
            f"CRC32C REFUSED {r['host']} {r['unit']}: {c['refused']} GET bodies did not match "
            f"the crc32c stored with them (each a miss, recomputed; {c['checked']} checked; the "
            f"connector's count at {remote_tier.shown_time(c['at'])}, logged at most once a "
            "minute): find what alters objects between RGW and the engine"
        )
    return out


def tier_lines(doc: dict) -> list[str]:
    """Hits per tier, one line per engine read (deploys/monitoring/tiers.py)."""
    out = []
    for r in doc["engines"]:
        if r["reachable"] and r.get("health") is not None:
            t = tiers.Tiers(r.get("tier_gpu_tokens"), r.get("tier_dram_tokens"),
                            r.get("tier_s3_tokens"))  # fmt: skip
            out.append(f"hits by tier {r['host']} {r['unit']}: {tiers.line(t)}")
    return out


def namespace_lines(doc: dict) -> list[str]:
    """One line per namespace in the bucket: who writes it, or that it waits for the lifecycle."""
    out = []
    for row in doc.get("namespaces") or ():
        where = row["namespace"] or "bucket root (LMCache's own names)"
        who = (
            f"written by {', '.join(row['groups'])}"
            if row["current"]
            else "no group writes it: old objects, unread, until the lifecycle rule removes them"
        )
        out.append(f"namespace {where}: {who}")
    return out


def mp_server_lines(doc: dict) -> list[str]:
    """One line per MP-mode host: its LMCache server (none in-process)."""
    return [mp_server.line(h, s) for h, s in sorted((doc.get("mp_servers") or {}).items())]


def table(doc: dict) -> str:
    lines = engine_table(doc) + crash_lines(doc) + s3_off_lines(doc) + tier_lines(doc)
    lines += mp_server_lines(doc)
    lines += puts_skipped_lines(doc) + crc32c_lines(doc)
    lines += [""] + cluster_lines(doc)
    for split in doc["cache_group_splits"]:
        values = ", ".join(f"{h}={v}" for h, v in split["values"].items())
        lines.append(
            f"CACHE GROUP SPLIT {split['group']}: {split['field']} differs ({values}; "
            f"{split['setting']}): these engines do not reuse each other's chunks"
        )
    lines += namespace_lines(doc)
    lines += report_lines(doc)
    by_source: dict[str, list[str]] = {}
    for r in doc["engines"]:
        if r.get("prefill_source"):
            at = f"{r['host']} at {r['prefill_at_tokens']:.0f} tokens"
            by_source.setdefault(r["prefill_source"], []).append(at)
    for source, engines in by_source.items():
        lines.append(f"saved GPU time ({', '.join(engines)}): {source}")
    if not by_source:
        lines.append(f"saved GPU time: {doc['prefill_note']}")
    lines.append(summary_line(doc))
    if doc["partial"]:
        lines.append("PARTIAL: " + "; ".join(doc["problems"]))
    return "\n".join(lines)


def write_json(doc: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    return path


def write_png(doc: dict, path: str | Path) -> tuple[Path | None, str | None]:
    """Hit ratio and saved GPU seconds per engine, side by side; (path, None) or (None, why)."""
    rows = [r for r in doc["engines"] if r["reachable"]]
    if not rows:
        return None, "no engine read: chart skipped"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "matplotlib not installed (pip install 'kvceph[report]'): chart skipped"
    labels = [
        r["host"] if r["unit"] == "vllm.service" else f"{r['host']}\n{r['unit']}" for r in rows
    ]
    ratios = [100 * (r.get("hit_ratio") or 0) for r in rows]
    saved = [r.get("saved_gpu_seconds") or 0 for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(rows) * 2), 4))
    a.bar(range(len(rows)), ratios, color="tab:blue")
    a.set_xticks(range(len(rows)), labels, fontsize=8)
    a.set_ylim(0, 112)  # room for the labels above a 100 % bar
    a.set_yticks(range(0, 101, 20))
    a.set_ylabel("LMCache hit tokens / queried tokens (%)")
    a.set_title("cache hit ratio since engine start", fontsize=10)
    for i, r in enumerate(rows):
        a.annotate(
            f"{ratios[i]:.1f} %\n{r.get('external_hits') or 0:.0f}/"
            f"{r.get('external_queries') or 0:.0f} tokens",
            (i, ratios[i]),
            ha="center",
            va="bottom",
            fontsize=7,
        )
    b.bar(range(len(rows)), saved, color="tab:green")
    b.set_xticks(range(len(rows)), labels, fontsize=8)
    b.set_ylim(0, max(saved) * 1.15 or 1.0)
    for i in range(len(rows)):
        b.annotate(f"{saved[i]:.2f} s", (i, saved[i]), ha="center", va="bottom", fontsize=7)
    b.set_ylabel("GPU prefill seconds saved")
    b.set_title("GPU time the cache saved since engine start", fontsize=10)
    measured = all(r.get("prefill_measured") for r in rows)
    note = (
        "prefill s/token measured on this fleet"
        if measured
        else "prefill s/token from configured figures (not measured on this fleet)"
    )
    fig.suptitle(f"kvceph status {doc['run']}: {note}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path, None
