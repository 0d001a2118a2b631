"""Key vectors computed by LMCache 0.5.6's OWN ChunkedTokenDatabase + CacheEngineKey.

Run with a venv holding lmcache==0.5.6 (--no-deps), pyyaml, requests, cachetools and cbor2:
    PYTHONHASHSEED=67 python tests/lmcache_oracle.py > tests/vectors.json
torch and transformers are stubbed (only dtype objects are needed); vLLM is replaced by a
replica of vllm/utils/hashing.py (sha256, sha256_cbor) and kv_cache_utils.init_none_hash.
On a GPU host with the real vLLM + LMCache installed, run it with KVCEPH_REAL=1 to use the
real modules instead of the stubs -- the output must equal tests/vectors.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import types

CASES = [
    # name, model, tp, dtype, chunk_size, save_unfull_chunk, algorithm, text
    ("cbor-256-tp2", "Qwen/Qwen3-32B", 2, "bfloat16", 256, False, "sha256_cbor", "hi " * 600),
    ("cbor-16-tp1", "Qwen/Qwen3-32B", 1, "bfloat16", 16, False, "sha256_cbor", "0 " + "hi " * 40),
    ("cbor-unfull", "lab/tiny", 1, "half", 16, True, "sha256_cbor", "a b c " * 7),
    ("sha256-16", "Qwen/Qwen3-32B", 2, "bfloat16", 16, False, "sha256", "1 " + "hi " * 40),
    ("builtin-16", "Qwen/Qwen3-32B", 2, "bfloat16", 16, False, "builtin", "2 " + "hi " * 40),
]


def _stub() -> None:
    torch = types.ModuleType("torch")

    class dtype:  # noqa: N801
        def __init__(self, n):
            self.n = n

        def __repr__(self):
            return "torch." + self.n

    names = "float16 bfloat16 float32 float64 int8 uint8 int16 int32 int64 bool".split()
    for n in names + ["float8_e4m3fn", "float8_e5m2"]:
        setattr(torch, n, dtype(n))
    torch.half, torch.float, torch.double = torch.float16, torch.float32, torch.float64
    torch.Tensor = type("Tensor", (), {})
    torch.Size = tuple
    torch.device = str
    torch.__getattr__ = lambda name: type(name, (), {})
    sys.modules["torch"] = torch
    tr = types.ModuleType("transformers")
    tr.AutoTokenizer = object
    sys.modules["transformers"] = tr
    stub_vllm()


def stub_vllm() -> None:
    """vLLM's two hashing pieces LMCache asks for, as vllm/utils/hashing.py and
    v1/core/kv_cache_utils.init_none_hash define them (also tests/unit/fixtures/object_names/
    record.py's, which runs LMCache on the real torch)."""
    import cbor2

    def sha256(x):
        return hashlib.sha256(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)).digest()

    def sha256_cbor(x):
        return hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()

    def get_hash_fn_by_name(n):
        if n == "sha256":
            return sha256
        if n == "sha256_cbor":
            return sha256_cbor
        raise ValueError(f"Unsupported hash function: {n}")

    mods = {n: types.ModuleType(n) for n in (
        "vllm", "vllm.utils", "vllm.utils.hashing", "vllm.v1", "vllm.v1.core",
        "vllm.v1.core.kv_cache_utils")}  # fmt: skip
    mods["vllm.utils.hashing"].get_hash_fn_by_name = get_hash_fn_by_name
    kcu = mods["vllm.v1.core.kv_cache_utils"]

    def init_none_hash(fn):
        seed = os.getenv("PYTHONHASHSEED")
        kcu.NONE_HASH = os.urandom(32) if seed is None else fn(seed)

    kcu.init_none_hash = init_none_hash
    for name, mod in mods.items():
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, mod)


def main() -> None:
    if os.environ.get("KVCEPH_REAL") != "1":
        _stub()
    import torch
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.token_database import ChunkedTokenDatabase

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from kvceph_lab_engine.tokenizer import tokenize

    out = {"pythonhashseed": os.environ.get("PYTHONHASHSEED"), "cases": []}
    for name, model, tp, dt, chunk, unfull, algo, text in CASES:
        cfg = LMCacheEngineConfig.from_defaults(
            chunk_size=chunk, save_unfull_chunk=unfull, pre_caching_hash_algorithm=algo
        )
        tokens = tokenize(text)
        keys = []
        for worker in range(tp):
            meta = LMCacheMetadata(
                model_name=model,
                world_size=tp,
                local_world_size=tp,
                worker_id=worker,
                local_worker_id=worker,
                kv_dtype=getattr(torch, dt),
                kv_shape=(1, 2, chunk, 1, 1),
            )
            db = ChunkedTokenDatabase(cfg, meta)
            keys.append([k.to_string() for _, _, k in db.process_tokens(tokens=tokens)])
        out["cases"].append(
            {
                "name": name,
                "model": model,
                "tp": tp,
                "kv_dtype": dt,
                "chunk_size": chunk,
                "save_unfull_chunk": unfull,
                "algorithm": algo,
                "text": text,
                "keys_by_worker": keys,
            }  # fmt: skip
        )
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
