"""The verify chart (reports/verify-<run>.png) from a real report of the cephadm lab (2026-12-01,
tests/fixtures/verify/): values on the bars, cache groups apart, a legend, and the note that the
lab engine simulated the TTFTs, taken from what /v1/models said (owned_by)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploys.verification import report as reporting
from deploys.verification.verdicts import Verdict

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "verify" / "lab-cephadm-2026-12-01.json"


def real_report(engine: str) -> reporting.Report:
    """The recorded report, with the engines' owned_by and the cache groups of that run."""
    data = json.loads(REAL.read_text())
    rep = reporting.Report(data["run_id"], data["started"])
    for s in data["steps"]:
        rep.add(
            reporting.StepResult(
                s["host"],
                s["step"],
                Verdict(s["verdict"], s["message"]),
                s["ttft"],
                s["hit_tokens"],
                s["objects"],
            )
        )
    rep.groups = [["gpu1", "gpu2"], ["gaudi1"]]
    rep.engines = {h: engine for h in ("gpu1", "gpu2", "gaudi1")}
    return rep


def test_lab_engine_ttfts_are_noted_as_simulated():
    note = reporting.simulated_note(real_report("kvceph-lab-engine"))
    assert note.startswith("TTFTs of gpu1, gpu2, gaudi1 are SIMULATED by the kvceph lab engine")
    assert reporting.simulated_note(real_report("vllm")) is None


def test_chart_of_a_real_lab_run(tmp_path):
    pytest.importorskip("matplotlib")
    rep = real_report("kvceph-lab-engine")
    rep.steps[-2].verdict = Verdict("warn", "slow")  # a WARN bar is hatched and labelled
    path, notice = reporting.write_png(rep, tmp_path)
    assert notice is None and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
