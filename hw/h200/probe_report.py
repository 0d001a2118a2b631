#!/usr/bin/env python3
"""The H200 probe run (hw/h200/probe.sh) judged as probe.py judges it, next to what the engine
measured on the same machine and Ceph setup (the 2026-12-01 proof's cold/warm cells).

    probe_report.py PROBE_RESULTS_DIR PROOF_RESULTS_DIR RENDERED_DIR

Per probe line: deploys/probe/report.host_result with the prefill rate and load figure of the
proof's 16k verify report (as probe.py takes them from the last verify run), then the engine's
own verdict per length from warm vs cold TTFT: pays (warm <= cold / 1.2), marginal (within
x1.2 either way), slower than recompute. Also the probe's verdict at 128k with the prefill rate
measured at 128k, since kvceph_prefill_tokens_per_s and the verify rate are flat while prefill is
superlinear. Writes PROBE_RESULTS_DIR/summary.json and prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from deploys.probe import report, verdicts  # noqa: E402


def engine_verdict(warm: float, cold: float) -> str:
    if warm * verdicts.PAYS_MARGIN <= cold:
        return verdicts.PAYS
    if warm <= cold * verdicts.PAYS_MARGIN:
        return verdicts.MARGINAL
    return verdicts.SLOWER


def main(probe_dir: Path, proof_dir: Path, rendered: Path) -> int:
    verify = json.loads(next(proof_dir.glob("verify-*.json")).read_text())
    figures = report.verify_figures(verify, ("h200",))
    cells = [json.loads(x) for x in (proof_dir / "cells.jsonl").read_text().splitlines()]
    cold = {c["label"]: c for c in cells if c["kind"] == "cold"}
    engine = []
    for w in (c for c in cells if c["kind"] == "warm"):
        chunk = 1024 if w["label"].startswith("c1024") else 256
        rgw = 4 if "-rgw4-" in w["label"] else 1
        engine.append(
            {
                "label": w["label"],
                "chunk_size": chunk,
                "rgw": rgw,
                "tokens": w["document_tokens"],
                "cold_s": w["cold_ttft_s"],
                "warm_s": w["ttft_s"],
                "engine_load_gb_per_s": w.get("achieved_GBps"),
                "verdict": engine_verdict(w["ttft_s"], w["cold_ttft_s"]),
            }
        )
    rate_128k = next(
        c["prompt_tokens"] / c["ttft_s"]
        for c in cold.values()
        if c["document_tokens"] > 100000 and c["chunk_size"] == 256
    )
    probes = []
    for line in (probe_dir / "probe.jsonl").read_text().splitlines():
        p = json.loads(line)
        spec = json.loads((rendered / p["variant"] / "probe.json").read_text())
        shape = verdicts.Shape(**spec["shape"])
        result = report.host_result(
            f"h200 {p['label']}", shape, p["raw"], spec["prefill_setting"], figures
        )
        at_128k = verdicts.judge(shape, verdicts.summarize(p["raw"]), rate_128k, (131072,))[0]
        result["verdict_128k_at_measured_128k_rate"] = at_128k.verdict
        result["break_even_128k_at_measured_128k_rate"] = at_128k.break_even_gb_per_s
        probes.append(result)
    summary = {
        "prefill_rate_128k_tokens_per_s": rate_128k,
        "probe": probes,
        "engine": engine,
    }
    (probe_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(report.table(probes))
    print(f"\nprobe at 128k with the 128k prefill rate ({rate_128k:.0f} tok/s):")
    for r in probes:
        print(
            f"  {r['host']}: break-even {r['break_even_128k_at_measured_128k_rate']:.3f} GB/s, "
            f"{r['verdict_128k_at_measured_128k_rate']}"
        )
    print("\nengine, same machine (warm vs cold TTFT):")
    for e in engine:
        print(
            f"  {e['label']:<28} chunk {e['chunk_size']:>4} rgw {e['rgw']} {e['tokens']:>6} tok: "
            f"cold {e['cold_s']:.2f} s warm {e['warm_s']:.2f} s "
            f"(engine load {e['engine_load_gb_per_s']} GB/s): {e['verdict']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
