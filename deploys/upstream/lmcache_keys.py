"""Chunk keys exactly as LMCache 0.5.6 + vLLM compute them (reimplemented, no torch).

kvceph's verify names a run's objects with it (deploys/verification/object_names.py); the lab
engine keys its chunks with it (lab/engine/src/kvceph_lab_engine/hashing.py is this file).
``resolve_hash_fn`` is LMCache's startup resolution, as the lab engine runs it.

Sources (LMCache 0.5.6 wheel):
- lmcache/v1/token_database.py: ChunkedTokenDatabase._chunk_tokens / _prefix_hash /
  _hash_tokens: hash = _normalize_hash_to_int(hash_func((prefix_hash, tuple(tokens), ())));
  bytes digests are folded to int.from_bytes(digest[:8], "big"). The chain starts at
  NONE_HASH, set by vLLM's kv_cache_utils.init_none_hash(hash_func):
  hash_func(os.environ["PYTHONHASHSEED"]) if set, else os.urandom(32); then normalised.
- hash_func: vllm.utils.hashing.get_hash_fn_by_name(name) for "sha256" (pickle, highest
  protocol), "sha256_cbor" (cbor2.dumps(canonical=True)); "sha256_cbor_64bit" is the old name
  of sha256_cbor. Any other name (the default "builtin") is not found there, and LMCache falls
  back to Python's hash() -- which depends on PYTHONHASHSEED and the Python minor family.
- lmcache/utils.py: CacheEngineKey.to_string() =
  f"{model}@{world_size}@{worker_id}@{chunk_hash_hex}@{dtype_str}", chunk_hash_hex = f"{h:x}"
  for ints (a negative builtin hash gives "-..."). dtype_str from TORCH_DTYPE_TO_STR_DTYPE.
- lmcache/v1/storage_backend/connector/s3_connector.py: request path =
  "/" + urllib.parse.quote(key_str.replace("/", "_")): the object key in the bucket is the key
  string with the model's "/" turned into "_"; on the wire "@" is sent as %40.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import struct
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

log = logging.getLogger(__name__)  # the lab engine: kvceph_lab_engine.hashing, as before

# torch dtype name (as vLLM's --kv-cache-dtype / model dtype) -> LMCache key string
DTYPE_STR = {
    "float16": "half",
    "half": "half",
    "bfloat16": "bfloat16",
    "float32": "float",
    "float": "float",
    "float64": "double",
    "double": "double",
    "int8": "int8",
    "uint8": "uint8",
    "fp8": "fp8_e4m3fn",
    "fp8_e4m3": "fp8_e4m3fn",
    "fp8_e4m3fn": "fp8_e4m3fn",
    "fp8_e5m2": "fp8_e5m2",
}


# --- canonical CBOR (RFC 8949 core deterministic encoding, what cbor2 canonical=True emits
# for the types that occur here: None, bool, int, str, bytes, tuple/list) ------------------
def _cbor_head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([(major << 5) | n])
    if n < 0x100:
        return bytes([(major << 5) | 24, n])
    if n < 0x10000:
        return bytes([(major << 5) | 25]) + struct.pack(">H", n)
    if n < 0x100000000:
        return bytes([(major << 5) | 26]) + struct.pack(">I", n)
    return bytes([(major << 5) | 27]) + struct.pack(">Q", n)


def cbor_dumps(obj: Any) -> bytes:
    """Encode like cbor2.dumps(obj, canonical=True) for None/bool/int/str/bytes/tuple/list."""
    if obj is None:
        return b"\xf6"
    if obj is True:
        return b"\xf5"
    if obj is False:
        return b"\xf4"
    if isinstance(obj, int):
        if obj >= 0:
            if obj < 1 << 64:
                return _cbor_head(0, obj)
            payload = obj.to_bytes((obj.bit_length() + 7) // 8, "big")
            return b"\xc2" + _cbor_head(2, len(payload)) + payload
        neg = -1 - obj
        if neg < 1 << 64:
            return _cbor_head(1, neg)
        payload = neg.to_bytes((neg.bit_length() + 7) // 8, "big")
        return b"\xc3" + _cbor_head(2, len(payload)) + payload
    if isinstance(obj, str):
        data = obj.encode("utf-8")
        return _cbor_head(3, len(data)) + data
    if isinstance(obj, (bytes, bytearray)):
        return _cbor_head(2, len(obj)) + bytes(obj)
    if isinstance(obj, (tuple, list)):
        return _cbor_head(4, len(obj)) + b"".join(cbor_dumps(x) for x in obj)
    raise TypeError(f"cbor_dumps: unsupported type {type(obj).__name__}")


def sha256(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(obj: Any) -> bytes:
    return hashlib.sha256(cbor_dumps(obj)).digest()


# names vLLM's get_hash_fn_by_name resolves (that LMCache asks for); xxhash variants need
# the xxhash package, which the lab hosts do not have -> refused at startup, not faked.
VLLM_HASH_FNS: dict[str, Callable[[Any], bytes]] = {
    "sha256": sha256,
    "sha256_cbor": sha256_cbor,
    "sha256_cbor_64bit": sha256_cbor,
}
UNSUPPORTED_HASH_FNS = ("xxhash", "xxhash_cbor", "sha256_msgpack", "xxhash_msgpack")


def normalize(value: int | bytes) -> int:
    if isinstance(value, bytes):
        return int.from_bytes(value[:8], "big")
    return value


def resolve_hash_fn(name: str) -> tuple[str, Callable[[Any], Any]]:
    """(effective name, function) for LMCache's pre_caching_hash_algorithm."""
    if name in VLLM_HASH_FNS:
        return name, VLLM_HASH_FNS[name]
    if name in UNSUPPORTED_HASH_FNS:
        raise ValueError(f"pre_caching_hash_algorithm {name!r} is not emulated by the lab engine")
    log.warning(
        "Could not load '%s' from vLLM. Using builtin hash. "
        "This may cause inconsistencies in distributed caching.",
        name,
    )
    if os.environ.get("PYTHONHASHSEED") is None:
        log.warning("Using builtin hash without PYTHONHASHSEED set.")
    return "builtin", hash


def none_hash(hash_fn: Callable[[Any], Any], seed: str | None) -> int:
    """vLLM init_none_hash + LMCache normalisation."""
    if seed is None:
        return normalize(os.urandom(32))
    return normalize(hash_fn(seed))


class ChunkHasher:
    """Token list -> chained chunk hashes -> LMCache object names."""

    def __init__(
        self,
        *,
        model: str,
        world_size: int,
        kv_dtype: str,
        chunk_size: int,
        save_unfull_chunk: bool,
        algorithm: str,
        seed: str | None,
    ):
        if kv_dtype not in DTYPE_STR:
            raise ValueError(f"Unsupported dtype in CacheEngineKey: {kv_dtype}")
        self.model = model
        self.world_size = world_size
        self.dtype_str = DTYPE_STR[kv_dtype]
        self.chunk_size = chunk_size
        self.save_unfull_chunk = save_unfull_chunk
        self.algorithm, self.hash_fn = resolve_hash_fn(algorithm)
        self.none_hash = none_hash(self.hash_fn, seed)

    def chunks(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """(start, end) of each chunk LMCache would key."""
        n = len(tokens)
        end = n if self.save_unfull_chunk else n - n % self.chunk_size
        return [(i, min(i + self.chunk_size, n)) for i in range(0, end, self.chunk_size)]

    def chunk_hashes(self, tokens: Sequence[int]) -> list[int]:
        prefix = self.none_hash
        out = []
        for start, end in self.chunks(tokens):
            prefix = normalize(self.hash_fn((prefix, tuple(tokens[start:end]), ())))
            out.append(prefix)
        return out

    def key_string(self, chunk_hash: int, worker_id: int) -> str:
        return f"{self.model}@{self.world_size}@{worker_id}@{chunk_hash:x}@{self.dtype_str}"


def object_name(key_string: str) -> str:
    """The S3 object key LMCache's S3Connector ends up with (the model's '/' -> '_')."""
    return key_string.replace("/", "_")


def request_path(key_string: str) -> str:
    """The HTTP path LMCache's S3Connector sends (_format_safe_path: '@' -> %40)."""
    return "/" + quote(object_name(key_string))
