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
import os
import re
from pathlib import Path

FIELDS = ("prompt_tokens", "cold_ttft_s", "warm_ttft_s", "kv_bytes")


def path_for(directory: str, model: str, tensor_parallel_size: int) -> Path:
    """``<directory>/<model, / as -->-tp<N>.json``: one file per cache group."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", model.strip("/")) or "model"
    return Path(directory) / f"{slug}-tp{tensor_parallel_size}.json"


def read(path: Path) -> dict | None:
    """The group's figures, or None when there are none; ValueError for an unusable file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"controller: {path}: unreadable ({exc}); fix: delete it and rerun verify.py"
        ) from None
    bad = [
        k
        for k in FIELDS
        if isinstance(data.get(k), bool) or not isinstance(data.get(k), (int, float))
        or data[k] <= 0
    ]  # fmt: skip
    if bad:
        raise ValueError(
            f"controller: {path}: {', '.join(bad)} missing or not > 0; fix: delete it and "
            "rerun verify.py"
        )
    return data


def write(path: Path, figures: dict) -> Path:
    """Replace the group's file atomically (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path
