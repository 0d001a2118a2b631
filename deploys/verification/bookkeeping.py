"""Which bucket objects this run created, how many it should have, and which may be deleted.

LMCache names objects ``model@world_size@worker_id@hash@dtype`` at the bucket root (the model's
'/' becomes '_'). The runner lists the bucket under the cache group's ``model@tp@`` prefix
before the cold request and after it: the difference, written since the run started, is the
run's own set. Deletion touches that set only, and only when its size is the one expected for
the document: anything else means other traffic or a miscount, and the bucket is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: datetime  # timezone-aware


def object_prefix(model: str, tensor_parallel_size: int) -> str:
    """Key prefix shared by one cache group's objects."""
    return f"{model.replace('/', '_')}@{tensor_parallel_size}@"


def stored_tokens(prompt_tokens: int, chunk_size: int, save_unfull_chunk: bool) -> int:
    """Prompt tokens whose KV LMCache stores: full chunks, plus the tail if unfull is saved."""
    full = (prompt_tokens // chunk_size) * chunk_size
    return prompt_tokens if save_unfull_chunk else full


def expected_objects(
    prompt_tokens: int, chunk_size: int, tensor_parallel_size: int, save_unfull_chunk: bool
) -> int:
    """One object per chunk and TP worker."""
    chunks = prompt_tokens // chunk_size
    if save_unfull_chunk and prompt_tokens % chunk_size:
        chunks += 1
    return chunks * tensor_parallel_size


def expected_hit_tokens(prompt_tokens: int, chunk_size: int, save_unfull_chunk: bool) -> int:
    """Tokens a warm request should load; when every prompt token is cached, the engine
    recomputes the last one (LMCacheConnectorV1 / vLLM need one token to sample from)."""
    stored = stored_tokens(prompt_tokens, chunk_size, save_unfull_chunk)
    return stored - 1 if stored == prompt_tokens and stored > 0 else stored


def created_since(
    before: Mapping[str, ObjectInfo],
    after: Mapping[str, ObjectInfo],
    since: datetime,
    skew_seconds: int,
) -> dict[str, ObjectInfo]:
    """Objects listed after but not before, written no earlier than ``since - skew``."""
    floor = since - timedelta(seconds=skew_seconds)
    return {k: o for k, o in after.items() if k not in before and o.last_modified >= floor}


def worker_counts(keys) -> dict[str, int]:
    """Objects per TP worker id (third '@' field); malformed keys count under '?'."""
    out: dict[str, int] = {}
    for key in keys:
        parts = key.split("@")
        worker = parts[2] if len(parts) >= 5 else "?"
        out[worker] = out.get(worker, 0) + 1
    return out


@dataclass(frozen=True)
class DeletionPlan:
    keys: tuple[str, ...]  # empty when refused
    refused: str | None  # why nothing is deleted


def deletion_plan(
    created: Mapping[str, ObjectInfo],
    expected: int,
    prefix: str,
    current: Mapping[str, ObjectInfo] | None = None,
) -> DeletionPlan:
    """The keys to delete, or a refusal that deletes nothing.

    + created: the run's objects (``created_since`` after the cold request)
    + expected: ``expected_objects`` for the document
    + prefix: the cache group's key prefix; every key must carry it
    + current: a fresh listing; keys gone since are skipped (already deleted/expired)
    """
    if not created:
        return DeletionPlan(
            (), "the cold request created no objects; nothing of this run to delete"
        )
    if len(created) != expected:
        return DeletionPlan(
            (),
            f"{len(created)} new objects where {expected} were expected: other writers or a "
            "miscount; deleting nothing (never the rest of the bucket)",
        )
    stray = sorted(k for k in created if not k.startswith(prefix))
    if stray:
        return DeletionPlan(
            (), f"key {stray[0]!r} lacks the group prefix {prefix!r}; deleting nothing"
        )
    keys = sorted(created if current is None else (k for k in created if k in current))
    return DeletionPlan(tuple(keys), None)
