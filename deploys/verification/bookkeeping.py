"""How many objects and hit tokens a document should give, and the run's objects per worker.

LMCache names objects ``model@world_size@worker_id@hash@dtype`` (the model's '/' becomes '_'),
kvceph's connector in its group's namespace folder (deploys/settings/namespace.py), the stock
one at the bucket root. Which names are the run's own is object_names.py's: the runner finds and
deletes those names only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from deploys.settings import namespace as namespaces


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: datetime  # timezone-aware


def object_prefix(model: str, tensor_parallel_size: int, namespace: str = "") -> str:
    """Key prefix shared by one cache group's objects: its namespace folder where it has one
    (kvceph's connector), else LMCache's ``<model>@<world size>@`` at the bucket root."""
    return namespace or f"{model.replace('/', '_')}@{tensor_parallel_size}@"


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


def worker_counts(keys) -> dict[str, int]:
    """Objects per TP worker id (third '@' field); malformed keys count under '?'."""
    out: dict[str, int] = {}
    for key in keys:
        parts = namespaces.split(key)[1].split("@")
        worker = parts[2] if len(parts) >= 5 else "?"
        out[worker] = out.get(worker, 0) + 1
    return out
