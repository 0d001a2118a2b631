"""LMCache 0.5.6 MP mode's chunk keys, as its server computes them from the engine's tokens.

kvceph's verify names a run's MP objects with it (deploys/verification/object_names.py); the
lab's MP server stand-in keys its chunks with it (lab/engine/src/kvceph_lab_engine/mp_keys.py
is this file).

``lmcache/v1/multiprocess/token_hasher.py``: ``h_i = hash_fn((h_{i-1}, tuple(chunk), None))``
over full chunks only (a partial chunk is dropped), the 32-byte digest of blake3 over the
previous hash (bytes as they are; the seed ``hash_fn((0, (0,), None))`` starts from the int 0
as 8 big-endian signed bytes) and the tokens as big-endian uint32. The key string is
``native_connector_l2_adapter._object_key_to_string``:
``<model>@<kv_rank 08x>@<object group x>@<hash hex>``, with ``kv_rank`` = ``world << 24 |
rank << 16 | local_world << 8 | local_rank`` (``distributed/api.py`` ``ComputeKVRank``; one
node: local = global).

blake3 is not in the lab's wheelhouse: where the module is missing, sha256 stands in with the
same chaining (``ALGORITHM`` says which), so lab names have the real shape, not the real hash.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

try:  # the real server's hash, when the venv has it
    import blake3 as _blake3
except ImportError:  # pragma: no cover - depends on the venv
    _blake3 = None

ALGORITHM = "blake3" if _blake3 is not None else "sha256 (lab stand-in for blake3)"


def _hash(prefix: bytes | int, tokens: Sequence[int]) -> bytes:
    h = _blake3.blake3() if _blake3 is not None else hashlib.sha256()
    h.update(prefix.to_bytes(8, "big", signed=True) if isinstance(prefix, int) else prefix)
    h.update(struct.pack(f">{len(tokens)}I", *tokens))
    return h.digest()


def kv_rank(world_size: int, rank: int) -> int:
    """LMCache's ComputeKVRank for a single-node engine of ``world_size`` workers.

    + world_size: TP x PP. + rank: the worker.
    """
    return (world_size << 24) | (rank << 16) | (world_size << 8) | rank


class MPHasher:
    """Token list -> chained chunk hashes -> LMCache MP key strings (the engine's hasher API).

    + model: the serve argument (LMCache's ``model_name``). + world_size: TP x PP.
    + chunk_size: the server's ``--chunk-size``.
    """

    mp = True
    save_unfull_chunk = False  # MP keys full chunks only

    def __init__(self, *, model: str, world_size: int, chunk_size: int):
        self.model = model
        self.world_size = world_size
        self.chunk_size = chunk_size
        self.algorithm = ALGORITHM
        self.none_hash = _hash(0, (0,))

    def chunks(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """(start, end) of each full chunk."""
        end = len(tokens) - len(tokens) % self.chunk_size
        return [(i, i + self.chunk_size) for i in range(0, end, self.chunk_size)]

    def chunk_hashes(self, tokens: Sequence[int]) -> list[bytes]:
        """The chained 32-byte hash of every full chunk."""
        prefix: bytes = self.none_hash
        out = []
        for start, end in self.chunks(tokens):
            prefix = _hash(prefix, tuple(tokens[start:end]))
            out.append(prefix)
        return out

    def key_string(self, chunk_hash: bytes, worker_id: int, group: int = 0) -> str:
        """LMCache's native-connector key of one worker's chunk (unsalted).

        + chunk_hash: from chunk_hashes. + worker_id: the TP rank. + group: object group id.
        """
        rank = kv_rank(self.world_size, worker_id)
        return f"{self.model}@{rank:08x}@{group:x}@{chunk_hash.hex()}"
