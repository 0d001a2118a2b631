"""The last verify.py verdict and the last probe.py verdict per host, from their reports.

Both write JSON on the controller, in ``kvceph_verify_report_dir`` (default ``reports/``):
``verify-<run>.json`` / ``verify-latest.json`` and ``probe-<run>.json`` / ``probe-latest.json``
(deploys/verification/report.py, deploys/probe/report.py). Nothing is kept on the hosts. A
probe run may cover only some hosts (``--limit``), so each host's verdict is taken from the
newest probe report that has it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path


def _read(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _when(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _run_time(run_id: str | None) -> datetime | None:
    # Run ids start with the run's UTC time: 20261201T033220Z-<nonce>.
    try:
        return datetime.strptime((run_id or "")[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def last_verify(directory: str | Path, now: datetime) -> dict:
    """``{"run", "passed", "verdict", "age_s", "failures", "path"}`` of verify-latest.json, or
    ``{"verdict": "never run", ...}`` when the directory has none."""
    path = Path(directory) / "verify-latest.json"
    doc = _read(path)
    if doc is None:
        return {"run": None, "passed": None, "verdict": "never run", "age_s": None, "path": None}
    when = _when(doc.get("started")) or _run_time(doc.get("run_id"))
    failures = [
        f"{s.get('host')}: {s.get('step')}: {s.get('message')}"
        for s in doc.get("steps", [])
        if s.get("verdict") == "fail"
    ]
    return {
        "run": doc.get("run_id"),
        "passed": bool(doc.get("passed")),
        "verdict": "pass" if doc.get("passed") else "fail",
        "age_s": (now - when).total_seconds() if when else None,
        "failures": failures,
        "path": str(path),
    }


def last_probes(directory: str | Path, now: datetime) -> dict[str, dict]:
    """Host -> its newest probe entry: ``{"run", "verdict", "engine_verdict", "error",
    "down_gb_per_s", "age_s"}``."""
    found: dict[str, dict] = {}
    paths = sorted(Path(directory).glob("probe-*.json"))
    docs = [d for d in (_read(p) for p in paths) if d and d.get("run_id")]
    for doc in sorted(docs, key=lambda d: d["run_id"], reverse=True):
        when = _when(doc.get("started")) or _run_time(doc["run_id"])
        for entry in doc.get("hosts", []):
            host = entry.get("host")
            if not host or host in found:
                continue
            found[host] = {
                "run": doc["run_id"],
                "verdict": entry.get("verdict"),
                "engine_verdict": entry.get("engine_verdict"),
                "error": entry.get("error"),
                "down_gb_per_s": entry.get("down_gb_per_s"),
                "age_s": (now - when).total_seconds() if when else None,
            }
    return found


def age(seconds: float | None) -> str:
    """'3 min', '2.5 h', '4.0 d' (None: '-')."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
