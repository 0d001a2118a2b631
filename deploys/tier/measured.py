"""Measured figures of each cache group, kept on the controller: what the crossover comes from.

verify.py writes one JSON file per cache group into ``kvceph_measured_dir`` (default
``measured/`` beside the inventory) after a warm step that loaded every chunk; deploy.py's
preflight reads it (crossover.py). Commit the directory with your inventory and group_data:
it decides what lmcache.yaml holds, so every controller must render from the same figures.
A new file changes ``kvceph.min_hit_tokens``, lmcache.yaml and the config digest: the next
deploy rolls the group like any other change.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

FIELDS = ("prompt_tokens", "cold_ttft_s", "warm_ttft_s", "kv_bytes")


def path_for(directory: str, model: str, tensor_parallel_size: int) -> Path:
    """``<directory>/<model, / as -->-tp<N>.json``: one file per cache group."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", model.strip("/")) or "model"
    return Path(directory) / f"{slug}-tp{tensor_parallel_size}.json"


# What each figure may be: a token count, seconds (a TTFT beyond a day is no measurement) and
# bytes. Bounds keep every later division finite (a 1e-320 token count is 0 after scaling).
_BOUNDS = {
    "prompt_tokens": (1, 10**9),
    "cold_ttft_s": (1e-6, 86400.0),
    "warm_ttft_s": (1e-6, 86400.0),
    "kv_bytes": (1, 10**15),
}


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number")


def read(path: Path) -> dict | None:
    """The group's figures, or None when there are none; a one-line ValueError for a file
    that is not verify.py's (never another exception: the preflight prints it as one line)."""
    try:
        # Python's json reads NaN and Infinity, which no measurement is.
        data = json.loads(path.read_text(), parse_constant=_refuse_constant)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(
            f"controller: {path}: unreadable ({exc}); fix: delete it and rerun verify.py"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"controller: {path}: holds a JSON {type(data).__name__}, not verify.py's object; "
            "fix: delete it and rerun verify.py"
        )
    bad = [k for k, (lo, hi) in _BOUNDS.items() if not _within(data.get(k), lo, hi)]
    if bad:
        raise ValueError(
            f"controller: {path}: {', '.join(bad)} missing or out of range "
            f"({'; '.join(f'{k} {lo:g}..{hi:g}' for k, (lo, hi) in _BOUNDS.items() if k in bad)}"
            "); fix: delete it and rerun verify.py"
        )
    return data


def _within(value, lo: float, hi: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and lo <= value <= hi


def write(path: Path, figures: dict) -> Path:
    """Replace the group's file atomically (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path
