"""The probe's report: per-host figures and verdicts as a table, ``probe-<run>.json`` and
``probe-latest.json`` in the report directory (``kvceph_verify_report_dir``), next to
verify.py's; and the line the deploy prints for a host whose engine it restarts.

The prefill rate comes from the last verify.py report when it measured the host's cache group
(prompt tokens / cold TTFT), else from ``kvceph_prefill_tokens_per_s``. verify.py's measured
warm load (KV bytes / warm TTFT) is set beside the probe's GET bandwidth: their ratio says how
much of what the link carries the engine gets.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from deploys.probe import verdicts as v

LATEST = "probe-latest.json"
VERIFY_LATEST = "verify-latest.json"


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def verify_figures(verify: dict | None, group: tuple[str, ...]) -> dict:
    """From a verify report: the cold prefill rate and warm load of a host of ``group``.

    Returns ``{"prefill_tokens_per_s", "load_gb_per_s", "host", "run"}`` (values may be None).
    """
    out = {"prefill_tokens_per_s": None, "load_gb_per_s": None, "host": None, "run": None}
    if not verify:
        return out
    for step in verify.get("steps", []):
        if step.get("host") not in group:
            continue
        figures = step.get("figures") or {}
        if step.get("step") == "cold" and step.get("ttft") and figures.get("prompt_tokens"):
            out["prefill_tokens_per_s"] = figures["prompt_tokens"] / step["ttft"]
            out["host"], out["run"] = step["host"], verify.get("run_id")
        if step.get("step") == "warm" and figures.get("load_bytes_per_s"):
            out["load_gb_per_s"] = figures["load_bytes_per_s"] / 1e9
    return out


def host_result(
    host: str,
    shape: v.Shape,
    raw: dict,
    prefill_setting: float,
    verify: dict,
) -> dict:
    """One host's entry of the report, from the remote probe's JSON."""
    measured = v.summarize(raw)
    if verify["prefill_tokens_per_s"]:
        rate = verify["prefill_tokens_per_s"]
        source = f"verify.py run {verify['run']} (cold TTFT on {verify['host']})"
    else:
        rate, source = prefill_setting, "kvceph_prefill_tokens_per_s"
    judged = v.judge(shape, measured, rate)
    load = verify["load_gb_per_s"]
    # What the engine got out of the same tier in the last verify run: on the H200 LMCache's
    # loads reached 0.54-0.61 of the raw GET rate, so the link's verdict alone was one class too
    # hopeful there (hw/h200/results/2026-12-01-probe). Judged on that rate as well when known.
    engine = None
    if load:
        engine_rate = v.Measured(measured.up_gb_per_s, load, measured.head_seconds)
        engine = v.overall(v.judge(shape, engine_rate, rate))
    return {
        "host": host,
        "chunk_bytes": shape.chunk_bytes,
        "tensor_parallel_size": shape.tensor_parallel_size,
        "objects": raw["objects"],
        "deleted": raw["deleted"],
        "rounds": len(raw["down_gb_per_s"]),
        "up_gb_per_s": measured.up_gb_per_s,
        "down_gb_per_s": measured.down_gb_per_s,
        "up_gb_per_s_min_max": [min(raw["up_gb_per_s"]), max(raw["up_gb_per_s"])],
        "down_gb_per_s_min_max": [min(raw["down_gb_per_s"]), max(raw["down_gb_per_s"])],
        "head_ms": measured.head_seconds * 1000,
        "prefill_tokens_per_s": rate,
        "prefill_source": source,
        "prompts": [
            {
                "tokens": p.tokens,
                "kv_bytes": p.kv_bytes,
                "prefill_s": p.prefill_seconds,
                "load_s": p.load_seconds,
                "break_even_gb_per_s": None
                if math.isinf(p.break_even_gb_per_s)
                else p.break_even_gb_per_s,
                "verdict": p.verdict,
            }
            for p in judged
        ],
        "verdict": v.overall(judged),
        "engine_verdict": engine,
        "verify_load_gb_per_s": load,
        "verify_load_ratio": load / measured.down_gb_per_s if load else None,
    }


def _gb(x) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x >= 0.01 else f"{x * 1000:.2f}M"


def table(results: list[dict]) -> str:
    """host, up/down GB/s, HEAD ms, prefill rate, break-even per prompt, verify ratio, verdict."""
    head = ["host", "up GB/s", "down GB/s", "HEAD ms", "prefill tok/s"]
    head += [f"b-e {t // 1024}k GB/s" for t in v.PROMPT_TOKENS]
    head += ["verify load GB/s", "verify/probe", "verdict (link; at verify's load rate)"]
    rows = []
    for r in results:
        if r.get("error"):
            rows.append([r["host"]] + ["-"] * (len(head) - 2) + [f"ERROR: {r['error']}"])
            continue
        row = [
            r["host"],
            _gb(r["up_gb_per_s"]),
            _gb(r["down_gb_per_s"]),
            f"{r['head_ms']:.1f}",
            f"{r['prefill_tokens_per_s']:.0f}",
        ]
        row += [
            "inf" if p["break_even_gb_per_s"] is None else _gb(p["break_even_gb_per_s"])
            for p in r["prompts"]
        ]
        ratio = r["verify_load_ratio"]
        row += [_gb(r["verify_load_gb_per_s"]), "-" if ratio is None else f"{ratio:.3f}"]
        engine = r.get("engine_verdict")
        row.append(r["verdict"] + (f"; {engine}" if engine else ""))
        rows.append(row)
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(x, widths, strict=False)) + "  " + x[-1]
        for x in [head, *rows]
    ]
    lines.insert(1, "-" * min(160, len(lines[0])))
    lines.append("(GB/s = 1e9 bytes/s; 'M' = MB/s; b-e = break-even GET bandwidth)")
    return "\n".join(lines)


def write(document: dict, directory: str | Path) -> Path:
    """probe-<run>.json and probe-latest.json; returns the first."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    path = directory / f"probe-{document['run_id']}.json"
    path.write_text(text)
    (directory / LATEST).write_text(text)
    return path


def last_verdict(directory: str | Path, host: str) -> str | None:
    """The deploy's line for a host it restarts: the last probe's verdict, or how to get one."""
    doc = read_json(Path(directory) / LATEST)
    entry = next((r for r in (doc or {}).get("hosts", []) if r.get("host") == host), None)
    if entry is None:
        return (
            f"no cache probe result for {host} in {directory}/{LATEST}; run probe.py to learn "
            "whether the S3 tier pays"
        )
    if entry.get("error"):
        return f"last cache probe ({doc['run_id']}) failed on {host}: {entry['error']}"
    engine = entry.get("engine_verdict")
    return (
        f"last cache probe ({doc['run_id']}): {host} loads {_gb(entry['down_gb_per_s'])} GB/s "
        f"from S3: {entry['verdict']}"
        + (f"; at the engine's measured load rate: {engine}" if engine else "")
    )
