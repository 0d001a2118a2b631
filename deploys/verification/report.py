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
    step: str  # preflight | s3 | cold | dram | warm | cross-node | fallback | cleanup
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
    # host names per cache group, in the order verified (the chart separates them)
    groups: list[list[str]] = field(default_factory=list)
    # host -> the engine that answered, /v1/models' owned_by ("vllm", "kvceph-lab-engine")
    engines: dict[str, str] = field(default_factory=dict)

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
        "groups": report.groups,
        "engines": report.engines,
        "steps": [
            {**asdict(s), "verdict": s.verdict.status, "message": s.verdict.message}
            for s in report.steps
        ],
    }


def write_json(report: Report, directory: str | Path, latest: bool = True) -> Path:
    """``verify-<run>.json``, and with ``latest`` its copy ``verify-latest.json`` (status.py's
    last verdict)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_dict(report), indent=2, sort_keys=True, default=str) + "\n"
    path = directory / f"verify-{report.run_id}.json"
    path.write_text(text)
    if latest:
        (directory / "verify-latest.json").write_text(text)
    return path


LAB_ENGINE = "kvceph-lab-engine"  # /v1/models owned_by of lab/engine (vLLM says "vllm")
STEP_COLORS = {
    "cold": "tab:gray",
    "dram": "tab:green",  # a same-node repeat from the node's DRAM tier
    "warm": "tab:blue",  # after a restart: from the S3 tier
    "cross-node": "tab:cyan",
    "fallback": "silver",
}
# Where each step's KV comes from: the legend names the tier, so the chart shows the tiers.
STEP_TIERS = {
    "cold": "recompute",
    "dram": "node DRAM",
    "warm": "S3 after restart",
    "cross-node": "S3, another node",
    "fallback": "recompute, objects deleted",
}


def simulated_note(report: Report) -> str | None:
    """The chart's note when lab engines answered: their TTFTs are simulated, not vLLM's."""
    lab = [h for h, engine in report.engines.items() if engine == LAB_ENGINE]
    if not lab:
        return None
    return (
        f"TTFTs of {', '.join(lab)} are SIMULATED by the kvceph lab engine (not vLLM): "
        "they show the cache chain works, not real prefill or load speed"
    )


def _group_of(report: Report, host: str) -> int:
    for i, hosts in enumerate(report.groups):
        if host in hosts:
            return i
    return len(report.groups)


def write_png(report: Report, directory: str | Path) -> tuple[Path | None, str | None]:
    """Bar chart of TTFT per step and host, grouped by cache group; (path, None) or (None, why).

    Each bar carries its value; a WARN or FAIL bar is hatched and says so; groups stand apart
    with their hosts above them; a note says when the lab engine simulated the TTFTs.
    """
    steps = [s for s in report.steps if s.ttft]
    if not steps:
        return None, "no TTFT measured: chart skipped"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return None, "matplotlib not installed (pip install 'kvceph[report]'): chart skipped"
    xs, x, last = [], 0.0, None
    for s in steps:  # one empty slot between cache groups
        group = _group_of(report, s.host)
        if last is not None and group != last:
            x += 1
        xs.append(x)
        x, last = x + 1, group
    fig, ax = plt.subplots(figsize=(max(7, 1.2 * len(xs) + 2), 4.6))
    bars = ax.bar(
        xs,
        [s.ttft for s in steps],
        color=[STEP_COLORS.get(s.step, "tab:purple") for s in steps],
        edgecolor=["tab:red" if s.verdict.status == FAIL else "black" for s in steps],
        hatch=[None if s.verdict.status == "pass" else "//" for s in steps],
    )
    labels = [
        f"{s.ttft:.2f} s" + ("" if s.verdict.status == "pass" else f"\n{s.verdict.status.upper()}")
        for s in steps
    ]
    ax.bar_label(bars, labels, fontsize=8, padding=2)
    ax.set_xticks(xs, [f"{s.host}\n{s.step}" for s in steps], fontsize=8)
    top = max(s.ttft for s in steps)
    ax.set_ylim(0, top * 1.3)
    groups = {}
    for s, pos in zip(steps, xs, strict=True):
        groups.setdefault(_group_of(report, s.host), []).append(pos)
    for i, positions in groups.items():
        hosts = report.groups[i] if i < len(report.groups) else []
        name = "cache group: " + ", ".join(hosts) if hosts else "other"
        ax.text((positions[0] + positions[-1]) / 2, top * 1.2, name, ha="center", fontsize=8)
        if positions[0] > 0:
            ax.axvline(positions[0] - 1, color="lightgray", linestyle="--", linewidth=1)
    ax.set_ylabel("TTFT (s)")
    ax.set_title(f"kvceph verify: TTFT per step\n{report.run_id}", fontsize=10)
    handles = [
        Patch(facecolor=c, edgecolor="black", label=f"{k}: {STEP_TIERS[k]}")
        for k, c in STEP_COLORS.items()
    ]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="WARN / FAIL"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    note = simulated_note(report)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, color="tab:red", weight="bold")
    fig.tight_layout(rect=(0, 0.05 if note else 0, 1, 1))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"verify-{report.run_id}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path, None
