"""The verification report: a table for stdout, a JSON file, and a PNG chart of TTFT.

Files go to the report directory (``kvceph_verify_report_dir``, default ``reports/``):
``verify-<run>.json`` and ``verify-<run>.png``; ``verify-latest.json`` is a copy of the last
run. matplotlib is optional (``pip install kvceph[report]``): without it the chart is skipped
with a notice.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from deploys.verification.verdicts import FAIL, Verdict


@dataclass
class StepResult:
    host: str
    step: str  # preflight | s3 | cold | warm | cross-node | fallback | cleanup
    verdict: Verdict
    ttft: float | None = None
    hit_tokens: float | None = None
    objects: int | None = None
    figures: dict = field(default_factory=dict)


@dataclass
class Report:
    run_id: str
    started: str  # ISO-8601 UTC
    steps: list[StepResult] = field(default_factory=list)

    def add(self, result: StepResult) -> StepResult:
        self.steps.append(result)
        return result

    @property
    def failures(self) -> list[StepResult]:
        return [s for s in self.steps if s.verdict.status == FAIL]

    def failure_lines(self) -> list[str]:
        """One line per failed check, with its likely cause."""
        return [f"{s.host}: {s.step}: {s.verdict.message}" for s in self.failures]


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def table(report: Report) -> str:
    """Fixed-width table: host, step, TTFT, hit tokens, objects, verdict."""
    head = ("host", "step", "TTFT s", "hit tokens", "objects", "verdict")
    rows = [
        (
            s.host,
            s.step,
            _num(s.ttft, ".3f"),
            _num(s.hit_tokens, ".0f"),
            _num(s.objects, "d"),
            f"{s.verdict.status.upper()}: {s.verdict.message}",
        )
        for s in report.steps
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    lines = []
    for r in [head, *rows]:
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
        )
    lines.insert(1, "-" * min(160, len(lines[0])))
    return "\n".join(lines)


def to_dict(report: Report) -> dict:
    return {
        "run_id": report.run_id,
        "started": report.started,
        "passed": not report.failures,
        "steps": [
            {**asdict(s), "verdict": s.verdict.status, "message": s.verdict.message}
            for s in report.steps
        ],
    }


def write_json(report: Report, directory: str | Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_dict(report), indent=2, sort_keys=True, default=str) + "\n"
    path = directory / f"verify-{report.run_id}.json"
    path.write_text(text)
    (directory / "verify-latest.json").write_text(text)
    return path


def write_png(report: Report, directory: str | Path) -> tuple[Path | None, str | None]:
    """Bar chart of TTFT per step and host; (path, None) or (None, why it was skipped)."""
    bars = [(f"{s.host}\n{s.step}", s.ttft, s.verdict.status) for s in report.steps if s.ttft]
    if not bars:
        return None, "no TTFT measured: chart skipped"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "matplotlib not installed (pip install 'kvceph[report]'): chart skipped"
    colors = {"pass": "tab:green", "warn": "tab:orange", "fail": "tab:red"}
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(bars)), 4))
    ax.bar(
        range(len(bars)),
        [b[1] for b in bars],
        color=[colors.get(b[2], "tab:gray") for b in bars],
    )
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("TTFT (s)")
    ax.set_title(f"kvceph verify: TTFT per step\n{report.run_id}", fontsize=10)
    fig.tight_layout()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"verify-{report.run_id}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path, None
