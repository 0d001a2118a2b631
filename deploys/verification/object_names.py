"""The bucket objects one verify run writes, named before it writes them.

LMCache 0.5.6 names a chunk's object ``<model>@<world size>@<worker id>@<hexhash>@<dtype>``
(the model's '/' turned into '_'), the hash chained over the prompt's token ids from a seed
(lmcache/v1/token_database.py, lmcache/utils.py CacheEngineKey.to_string). The lab engine
reimplements exactly that, tested against LMCache's own classes (lab/engine/tests/vectors.json,
tests/unit/fixtures/object_names/): :class:`ChunkHasher` is kvceph's (deploys/upstream/
lmcache_keys.py), and the lab engine keys its chunks with the same file.

The document starts with the run's nonce, so every name is the run's own: verify finds its
objects by name (an exact-name listing each), never by listing the model's prefix, and deletes
exactly those, whatever other traffic writes beside them.

The dtype field is LMCache's name for the engine's KV torch dtype, which the controller does
not see (vLLM stores an fp8 KV cache as uint8); :func:`stem`, the name up to that field, is
what the bucket is asked for: the chunk hash already makes it the run's.

kvceph's connector writes every name under its group's namespace folder (``kv/<fields>/``,
deploys/settings/namespace.py); ``namespace`` puts it in front, :func:`stem` keeps it.

With ``pre_caching_hash_algorithm: builtin`` the hash is Python's ``hash()`` in the engine's
process (its Python build and PYTHONHASHSEED): no name can be computed, :func:`refusal` says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from deploys.settings import namespace as namespaces
from deploys.upstream.lmcache_keys import VLLM_HASH_FNS, ChunkHasher, object_name
from deploys.upstream.lmcache_mp_keys import ALGORITHM as MP_ALGORITHM
from deploys.upstream.lmcache_mp_keys import MPHasher

SETTING = "kvceph_lmcache_hash_algorithm"
FIX = "sha256_cbor"


def refusal(algorithm: str) -> str | None:
    """Why the run's object names cannot be computed with ``algorithm``; None when they can."""
    if algorithm in VLLM_HASH_FNS:
        return None
    why = (
        "Python's hash() in the engine's process"
        if algorithm == "builtin"
        else "a hash the controller does not have"
    )
    return (
        f"pre_caching_hash_algorithm {algorithm} ({SETTING}) keys chunks with {why}: verify "
        f"cannot name the run's objects; fix: {SETTING}: {FIX} in group_data, then deploy.py"
    )


def names(
    tokens: Sequence[int],
    *,
    model: str,
    world_size: int,
    chunk_size: int,
    save_unfull_chunk: bool,
    algorithm: str,
    seed: int | str,
    kv_dtype: str = "bfloat16",
    namespace: str = "",
) -> list[str]:
    """Every object name the prompt ``tokens`` give, chunk by chunk, worker 0..world_size-1.

    + model: the ``vllm serve`` model argument (what LMCache puts in its keys)
    + algorithm: ``pre_caching_hash_algorithm`` (:func:`refusal` must be None for it)
    + seed: the engine's PYTHONHASHSEED (kvceph_python_hash_seed or the secret seed)
    + kv_dtype: kvceph_kv_dtype (the dtype field; :func:`stem` leaves it out)
    + namespace: the connector's ``kvceph.namespace`` ("" for LMCache's stock connector)
    """
    why = refusal(algorithm)
    if why:
        raise ValueError(why)
    if seed is None:
        # LMCache seeds the chain from os.urandom without PYTHONHASHSEED: no name is knowable.
        raise ValueError(
            "the engine's PYTHONHASHSEED is unknown: the run's names cannot be computed"
        )
    hasher = ChunkHasher(
        model=model,
        world_size=world_size,
        kv_dtype=kv_dtype,
        chunk_size=chunk_size,
        save_unfull_chunk=save_unfull_chunk,
        algorithm=algorithm,
        seed=str(seed),
    )
    return [
        namespace + object_name(hasher.key_string(h, worker))
        for h in hasher.chunk_hashes(tokens)
        for worker in range(world_size)
    ]


MP_FIELD = "@mp-lmcache"  # render.mp_prefix: the MP namespace folder carries it


def mp_names(
    tokens: Sequence[int], *, model: str, world_size: int, chunk_size: int, prefix: str
) -> list[str]:
    """MP mode's object names: kvceph's namespace folder + LMCache's MP key (deploys/upstream/
    lmcache_mp_keys.py: full chunks only, every worker) as the core names it (``object_name``: the
    model's '/' -> '_'), as in process.

    + model: the serve argument. + chunk_size: the server's --chunk-size.
    + prefix: render.mp_prefix (the adapter's ``namespace``: ``kv/<fields>@mp-lmcache<v>/``).
    """
    hasher = MPHasher(model=model, world_size=world_size, chunk_size=chunk_size)
    return [
        prefix + object_name(hasher.key_string(h, worker))
        for h in hasher.chunk_hashes(tokens)
        for worker in range(world_size)
    ]


def mp_refusal(lab_engine: bool) -> str | None:
    """Why MP names cannot be computed here: the real server hashes with blake3, which this
    controller lacks (the lab's stand-in hashes with what it has, lmcache_mp_keys.ALGORITHM)."""
    if lab_engine or MP_ALGORITHM == "blake3":
        return None
    return (
        "LMCache's MP server names chunks with blake3, which verify's Python lacks: it cannot "
        "name the run's objects; fix: pip install blake3 into kvceph's venv, then verify again"
    )


def stem(name: str) -> str:
    """The name up to and with the '@' before its dtype field (see the module's docstring);
    an MP name (no dtype field) is its own stem."""
    folder, _ = namespaces.split(name)
    if MP_FIELD in folder:
        return name
    folder, name = namespaces.split(name)
    parts = name.split("@")
    if len(parts) < 5:
        raise ValueError(f"{name!r} is not an LMCache object name")
    return folder + "@".join(parts[:4]) + "@"
