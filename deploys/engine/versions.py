"""Engine versions kvceph supports, and what each version accepts.

Sources (read 2026-11; docs/procedure.md "Where kvceph deliberately deviates"):
- vLLM 0.33 ``KVTransferConfig`` forbids extra fields; 0.26 still accepts the legacy ones.
- LMCache 0.5.6 S3 connector (``s3_connector.py``) and config loader (``v1/config.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from deploys.upstream.vllm_kv_transfer import FIELDS_026, FIELDS_033
from deploys.upstream.vllm_kv_transfer import KV_LOAD_FAILURE_POLICIES as KV_LOAD_FAILURE_POLICIES
from deploys.upstream.vllm_kv_transfer import KV_ROLES as KV_ROLES

# The pairs we test and support. The Gaudi plugin (vllm-gaudi 0.26) validates vLLM 0.26, so a
# fleet legitimately runs two vLLM versions; all pair with LMCache 0.5.6. 0.25 is the last vLLM
# before the packed K|V cache layout (vLLM PR #44455, 0.26.0) that LMCache 0.5.6's in-process
# GPU connector copies wrongly (LMCache issue #4463; KV_LOAD_DEFECTS below).
SUPPORTED_VLLM = ("0.25", "0.26", "0.33", "0.34")
SUPPORTED_LMCACHE = ("0.5.6",)
SUPPORTED_PAIRS = {("0.25", "0.5.6"), ("0.26", "0.5.6"), ("0.33", "0.5.6"), ("0.34", "0.5.6")}

# vLLM KVTransferConfig fields per minor version (deploys/upstream/vllm_kv_transfer.py).
KV_TRANSFER_FIELDS = {
    "0.33": FIELDS_033,
    "0.26": FIELDS_026,
    # 0.25.1's vllm/config/kv_transfer.py has the same fields as 0.26.0's (read in both wheels).
    "0.25": FIELDS_026,
    # 0.34.0: the fields kvceph renders (kv_connector, kv_role, kv_load_failure_policy,
    # kv_connector_extra_config) are there as in 0.33 (issue 51's reading of the wheels);
    # the rest of its field list was not re-read.
    "0.34": FIELDS_033,
}
# The connector name changed across releases; both supported vLLMs know only the V1 name.
KV_CONNECTOR = "LMCacheConnectorV1"

# --- LMCache multi-process (MP) mode: ``lmcache server`` + vLLM's LMCacheMPConnector ----------
# (read in the released wheels for issue 51; docs/design.md "MP mode")
ENGINE_MODES = ("inprocess", "mp")
MP_CONNECTOR = "LMCacheMPConnector"
# The vLLM minors whose LMCacheMPConnector was read (factory.py registers it in both), with
# LMCache 0.5.6. Gaudi has no MP path (HPU has no CUDA IPC): in-process only.
MP_PAIRS = {("0.25", "0.5.6"), ("0.34", "0.5.6")}
# MP pairs whose real engine cannot serve (hw/h200 loan 12): refused for a real vLLM unless
# kvceph_accept_mp_serve_defect (an operator's own patched LMCache). LMCache 0.5.6's
# LMCacheMPConnector reads ``CachedRequestData.resumed_req_ids``, which vLLM 0.34 removed: the
# engine core dies on its first scheduled request; vLLM 0.34's built-in copy of the connector
# calls the adapter with ``server_url``, which no released LMCache takes (0.5.6 and 0.5.7rc2 take
# ``server_urls``; 0.5.7rc2 still reads resumed_req_ids unguarded): it does not start.
MP_SERVE_DEFECTS = {
    ("0.34", "0.5.6"): "LMCache 0.5.6's LMCacheMPConnector reads CachedRequestData."
    "resumed_req_ids, which vLLM 0.34 removed: the engine dies on its first request "
    "(hw/h200/results/2026-12-07-loan12)",
}
# vLLM >= 0.34 reserves the KV cache with CUDA VMM unless told not to; LMCache 0.5.6's legacy
# CUDA IPC cannot share that memory. vLLM's factory turns it off only without
# kv_connector_module_path (never rendered): the flag says so explicitly.
MP_NO_EXTENSIBLE_KV = {"0.34": "--no-enable-extensible-kv-cache"}

# LMCache 0.5.6: extra_config keys the S3 connector reads. Anything else is ignored silently.
LMCACHE_S3_EXTRA_KEYS = {
    "0.5.6": frozenset(
        {
            "s3_region",
            "s3_num_io_threads",
            "s3_prefer_http2",
            "s3_enable_s3express",
            "disable_tls",
            "aws_access_key_id",
            "aws_secret_access_key",
            "save_chunk_meta",
        }
    )
}
# How LMCache's S3 adapter reads each extra_config key (0.5.6
# lmcache/v1/storage_backend/connector/s3_adapter.py ``create_connector``:
# ``int(extra_config.get(...))``, ``bool(...)``, ``str(...)``): a value
# of another type is not refused there but converted, so "false" reads as True and "8" fails
# at engine start (the engine then serves without the tier). Keys kvceph sets itself
# (s3_region, disable_tls) and the refused key pair are listed too, for completeness.
LMCACHE_S3_EXTRA_TYPES = {
    "0.5.6": {
        "s3_region": str,
        "s3_num_io_threads": int,
        "s3_prefer_http2": bool,
        "s3_enable_s3express": bool,
        "disable_tls": bool,
        "aws_access_key_id": str,
        "aws_secret_access_key": str,
        "save_chunk_meta": bool,
    }
}
# Seed keys that 0.5.x no longer reads (PR #2096 churn): dropped with a warning.
LMCACHE_IGNORED_SEED_KEYS = ("s3_max_io_concurrency", "s3_max_inflight_reqs", "s3_file_prefix")

# Hash algorithms LMCache can use for pre-caching (vLLM's get_hash_fn_by_name).
HASH_ALGORITHMS = ("builtin", "sha256", "sha256_cbor", "sha256_cbor_64bit", "xxhash", "xxhash_cbor")

# Pairs whose in-process LMCache connector loads KV that is not what vLLM wrote, on NVIDIA: since
# vLLM 0.26.0 (PR #44455) each layer's cache packs K and V in its last axis ([blocks, kv heads,
# block size, 2 x head size]); LMCache 0.5.6's VLLMPagedMemGPUConnectorV2 copies it with half the
# row width (LMCache issue #4463, fix PR #4467 open). Seen on the H200 with real weights (loan 7,
# hw/h200/results/2026-12-03-pair/: vLLM 0.33.0, warm greedy answers garbage, cold right) and
# not with vLLM 0.25.1 (loan 8, hw/h200/results/2026-12-04-v025/). Objects, hits and timings all
# look right: only the answers are wrong. Not Gaudi: there LMCache runs VLLMPagedMemHPUConnectorV2
# over vllm-gaudi's (K, V) tuples, whole rows (docs/design.md "Gaudi's pair").
# MP mode copies whole blocks with other code (mp_mem_kernels.py) and is not affected
# (#4463's own statement; the H200 proof of issue 51 is to show it).
KV_LOAD_DEFECTS = {
    ("0.26", "0.5.6"): "LMCache issue #4463",
    ("0.33", "0.5.6"): "LMCache issue #4463",
    ("0.34", "0.5.6"): "LMCache issue #4463",
}


def kv_load_defect(vllm: str, lmcache: str) -> str | None:
    """The known defect that makes this pair load wrong KV into vLLM on NVIDIA, or None."""
    return KV_LOAD_DEFECTS.get((vllm_key(vllm), lmcache_key(lmcache)))


# vLLM's default KV block size by accelerator: chunk_size must be a multiple of it.
KV_BLOCK_SIZE = {"nvidia": 16, "gaudi": 128}


def minor(version: str) -> str:
    """'0.33.0' -> '0.33'; '0.5.6' stays '0.5.6' for LMCache comparisons via lmcache_key()."""
    parts = str(version).split(".")
    return ".".join(parts[:2])


def vllm_key(version: str) -> str | None:
    """The supported vLLM minor for a version string, or None."""
    m = minor(version)
    return m if m in SUPPORTED_VLLM else None


def lmcache_key(version: str) -> str | None:
    """The supported LMCache release for a version string, or None."""
    v = str(version).split("+")[0]
    return v if v in SUPPORTED_LMCACHE else None


def pair_supported(vllm: str, lmcache: str) -> bool:
    """True when this vLLM/LMCache pair is one we support."""
    return (vllm_key(vllm), lmcache_key(lmcache)) in SUPPORTED_PAIRS


# --- LMCache object keys per supported pair: what an upgrade keeps or orphans -----------------


@dataclass(frozen=True)
class KeyScheme:
    """What an LMCache object key is made of: its format and the code that hashes its chunks.
    Two pairs read each other's objects only when both agree (deploys/engine/upgrade.py).

    + name: the scheme's identity; each scheme's engines hash with their own seed, derived
      from the fleet's and this name (deploys/engine/upgrade.py ``scheme_seed``): never rename one
    + key_format: the key string (``CacheEngineKey.to_string``)
    + chunk_hash: whose implementation computes the chained chunk hash and its NONE_HASH
    + sources: where each fact was read
    """

    name: str
    key_format: str
    chunk_hash: str
    sources: tuple[str, ...]


# LMCache 0.5.6 lmcache/utils.py CacheEngineKey.to_string (read in the 0.5.6 wheel).
_KEY_FORMAT_056 = "model@world_size@worker_id@chunk_hash_hex@dtype[@tags]"
_SOURCES_056 = (
    "key format: LMCache 0.5.6 lmcache/utils.py CacheEngineKey.to_string",
    # The hash is vLLM's: token_database.py takes get_hash_fn_by_name from vllm.utils.hashing
    # (or vllm.utils before vLLM PR #27151) and NONE_HASH from vLLM's
    # kv_cache_utils.init_none_hash (vLLM PR #20511; PR #23673 renamed sha256_cbor_64bit):
    # vLLM's hashing code moved and changed between minors, so each vLLM minor counts as its
    # own hash (the cache-group invariant kvceph_engine_profile.vllm_version, settings.py);
    # a patch release of one minor keeps it.
    "chunk hash: LMCache 0.5.6 lmcache/v1/token_database.py (_get_vllm_hash_func, "
    "NONE_HASH from vllm.v1.core.kv_cache_utils.init_none_hash)",
)
KEY_SCHEMES: dict[tuple[str, str], KeyScheme] = {
    (vllm, "0.5.6"): KeyScheme(
        f"vllm-{vllm}/lmcache-0.5.6",
        _KEY_FORMAT_056,
        f"vLLM {vllm}.x get_hash_fn_by_name + init_none_hash",
        _SOURCES_056,
    )
    for vllm in SUPPORTED_VLLM
}


def key_scheme(vllm: str, lmcache: str) -> KeyScheme | None:
    """The key scheme of a vLLM/LMCache pair (any patch release), None when unsupported."""
    return KEY_SCHEMES.get((vllm_key(vllm), lmcache_key(lmcache)))


def scheme_name(vllm: str, lmcache: str) -> str:
    """The key scheme's name of a pair; an unsupported pair (an engine from before kvceph
    supported it) is a scheme of its own, named by its vLLM minor and LMCache release."""
    scheme = key_scheme(vllm, lmcache)
    if scheme is not None:
        return scheme.name
    return f"vllm-{minor(vllm)}/lmcache-{str(lmcache).split('+')[0]} (unsupported)"
