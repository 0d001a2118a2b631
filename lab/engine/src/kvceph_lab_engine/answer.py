"""The lab engine's greedy answer: a function of the prompt and of the KV bytes it attends to.

A GPU's next token is a function of the prompt's KV; a wrong, stale or partial load changes
it. The lab engine has no model, so it draws its tokens from a hash of the prompt tokens and of
every chunk's KV bytes it holds for the request, in prefix order (computed: the bytes a cold
prefill writes, ``chunk_payload``; loaded: the bytes the tier returned). An honest load holds
the computed bytes, so it gives the cold answer; one altered byte gives another answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from kvceph_lab_engine.tokenizer import VOCAB_SIZE


def chunk_payload(name: str, size: int) -> bytes:
    """The KV bytes a prefill computes for one worker's chunk: sha256(object name) repeated.

    The object name carries the chain hash of the chunk's token prefix (and the model, TP,
    worker, dtype), so the bytes are a deterministic function of the prefix: a correct load
    reproduces them exactly.

    + name: the chunk's object name (hashing.object_name). + size: bytes per worker.
    """
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def digest(data: bytes) -> bytes:
    """What the answer keeps of one chunk's KV bytes."""
    return hashlib.sha256(data).digest()


def tokens(prompt: Sequence[int], kv: Sequence[bytes], n: int) -> list[int]:
    """``n`` greedy token ids for ``prompt`` given the digests of the KV it holds.

    + prompt: prompt token ids. + kv: one digest per chunk and worker, in prefix order.
    + n: tokens to generate.
    """
    h = hashlib.sha256(b"kvceph-lab-answer\0")
    h.update(repr(list(prompt)).encode())
    for d in kv:
        h.update(d)
    state = h.digest()
    out = []
    for i in range(n):
        block = hashlib.sha256(state + i.to_bytes(4, "big")).digest()
        out.append(int.from_bytes(block[:8], "big") % VOCAB_SIZE)
    return out


def text(token: int) -> str:
    """The detokenized text of one generated token (the lab tokenizer has no inverse)."""
    return f" t{token}"
