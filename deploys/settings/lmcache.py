"""LMCache settings: chunks, local tier, timeouts, the KV size behind the derived values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deploys.engine import versions
from deploys.settings import tier as tier_settings
from deploys.settings.engine import EngineSettings
from deploys.settings.reader import Reader
from deploys.tier import crossover, kv_sizing

# --- LMCache ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LMCacheSettings:
    chunk_size: int
    local_cpu: bool
    max_local_cpu_size: float | None  # GiB per worker; None: derived (deploys/tier/kv_sizing.py)
    save_unfull_chunk: bool
    enable_async_loading: bool
    remote_serde: str
    blocking_timeout_secs: int | None  # None: derived
    hash_algorithm: str
    extra_config: tuple[tuple[str, Any], ...]
    dropped_keys: tuple[str, ...] = field(default=())  # seed keys this version ignores
    lookup_timeout_ms: int | None = None  # None: derived
    # KV bytes per token per worker; None only for a model directory until preflight reads its
    # config.json from the host. kv_source says where the figure came from.
    kv_bytes_per_token: int | None = None
    kv_source: str = ""
    load_gb_per_s: float = kv_sizing.DEFAULT_LOAD_GB_PER_S
    # The cold prefill rate of the longest request (from tier.prefill_points).
    prefill_tokens_per_s: float = kv_sizing.DEFAULT_PREFILL_TOKENS_PER_S["nvidia"]
    tier: tier_settings.TierSettings | None = None  # None only when built by hand in tests


def _positive(r: Reader, key: str, default: Any, example: str, unit: str) -> float | None:
    # 1/1024 up: a smaller buffer or rate rounds to nothing (kv_sizing works in 1/1000 GiB);
    # 64 TiB: above any host's RAM, and finite.
    return r.size(
        key, default, lo=1 / 1024, hi=(65536, "above any host's RAM"), example=example, unit=unit
    )


def _kv_size(r: Reader, engine: EngineSettings) -> tuple[int | None, str]:
    """(KV bytes per token per worker, where that figure comes from); see kv_sizing."""
    tp = engine.tensor_parallel_size
    given = r.opt_int("kvceph_kv_bytes_per_token", lo=1)
    if given is not None:
        return -(-given // tp), "kvceph_kv_bytes_per_token"
    why = kv_sizing.refusal(engine.model)
    if why:
        raise r.fail(
            "kvceph_model",
            engine.model,
            f"its KV is not layers x heads x head_dim ({why}); kvceph does not guess its size",
            "serve a model with standard attention, or set kvceph_kv_bytes_per_token",
        )
    shape = kv_sizing.KNOWN_MODELS.get(engine.model)
    if shape is not None:
        return kv_sizing.kv_bytes_per_token(shape, engine.kv_dtype, tp), "known model table"
    if engine.serve_model.startswith("/") and engine.source.source != "mirror":
        return None, "config.json"  # read from the host by preflight
    raise r.fail(
        "kvceph_kv_bytes_per_token",
        None,
        f"KV size of {engine.model!r} unknown (not in deploys/tier/kv_sizing.py KNOWN_MODELS, not "
        "a model directory on the host)",
        "set it to layers x KV heads x head_dim x 2 x dtype bytes (whole model, TP 1)",
    )


_AS_READ = {
    bool: ("bool()", "any non-empty string reads as True", "use True or False (no quotes)"),
    int: ("int()", "the connector fails at engine start", "use a whole number >= 1 (no quotes)"),
    str: ("str()", "it is sent as text", "use a quoted string"),
}


def _check_type(r: Reader, lmc: str, key: str, value: Any) -> None:
    """``extra_config.<key>`` has the type LMCache ``lmc``'s reader applies to it."""
    want = versions.LMCACHE_S3_EXTRA_TYPES[lmc][key]
    ok = isinstance(value, want) and (want is bool or not isinstance(value, bool))
    if want is int and ok and value < 1:
        ok = False
    if not ok:
        reader, effect, fix = _AS_READ[want]
        raise r.fail(
            f"kvceph_lmcache_extra_config.{key}",
            value,
            f"LMCache {lmc} reads it with {reader} ({effect})",
            fix,
        )


# LMCache 0.5.6 serdes that store or load nothing through kvceph's tier: cachegen's output is
# not a whole S3 part, so the S3 connector refuses every upload (the H200: "chunk size 0 bytes
# does not match S3 part size 67108864 bytes. Partial/unfull chunks are not supported"); kivi is
# a stub whose (de)serialize return their input (naive_serde/kivi_serde.py), and the async
# loading path never deserializes: it promises a compression that does not happen.
_SERDE_REFUSED = {
    "cachegen": "LMCache 0.5.6's S3 connector refuses every cachegen upload (not a whole S3 "
    "part), so the tier stores nothing",
    "kivi": "is a no-op stub in LMCache 0.5.6 (nothing is compressed; the async loading path "
    "never deserializes)",
}


def _serde(r: Reader) -> str:
    serde = r.choice("kvceph_lmcache_remote_serde", "naive", ("naive", "kivi", "cachegen"))
    if serde in _SERDE_REFUSED:
        raise r.fail("kvceph_lmcache_remote_serde", serde, _SERDE_REFUSED[serde], "use naive")
    return serde


def lmcache_settings(r: Reader, engine: EngineSettings) -> LMCacheSettings:
    chunk = r.int("kvceph_lmcache_chunk_size", 256, lo=1)
    block = engine.kv_block_size
    if chunk % block:
        raise r.fail(
            "kvceph_lmcache_chunk_size",
            chunk,
            f"is not a multiple of the {engine.accelerator} KV block size {block}",
            f"use a multiple of {block}, e.g. 256",
        )
    if chunk > engine.max_model_len:
        # No chunk of a request is ever full, and LMCache's S3 connectors store whole chunks
        # only: nothing would be stored.
        raise r.fail(
            "kvceph_lmcache_chunk_size",
            chunk,
            f"is above kvceph_max_model_len {engine.max_model_len}: no chunk is ever full, so "
            "the tier stores nothing",
            f"use a multiple of {block} of at most {engine.max_model_len}, e.g. 256",
        )
    cpu = _positive(r, "kvceph_lmcache_max_local_cpu_size", None, "6.25 (GiB), or None", "GiB")
    kv_bytes, kv_source = _kv_size(r, engine)
    tier = tier_settings.load(r, engine.accelerator)
    if tier.min_hit_tokens is not None and tier.min_hit_tokens > engine.max_model_len:
        raise r.fail(
            "kvceph_min_hit_tokens",
            tier.min_hit_tokens,
            f"is above kvceph_max_model_len {engine.max_model_len}: no request is that long, "
            "so the tier never loads",
            f"use at most {engine.max_model_len}, or unset it (the measured crossover)",
        )
    extra = r.dict("kvceph_lmcache_extra_config", {"s3_prefer_http2": False})
    if tier.connector == "kvceph" and r.raw("kvceph_lmcache_extra_config", None) is not None:
        stock = sorted(k for k in extra if k != "save_chunk_meta")
        if stock:
            raise r.fail(
                "kvceph_lmcache_extra_config",
                stock,
                "only LMCache's stock S3 connector reads these, not kvceph's "
                "(kvceph_lmcache_connector kvceph)",
                "remove them; kvceph's connector takes kvceph_connector_connections and "
                "kvceph_connector_timeout_s",
            )
    lmc = versions.lmcache_key(engine.profile.lmcache_version)
    allowed = versions.LMCACHE_S3_EXTRA_KEYS[lmc]
    managed = {"s3_region", "disable_tls", "aws_access_key_id", "aws_secret_access_key"}
    dropped = tuple(k for k in extra if k in versions.LMCACHE_IGNORED_SEED_KEYS)
    for k in extra:
        if k in managed:
            raise r.fail(
                "kvceph_lmcache_extra_config",
                k,
                "is derived from the S3 settings",
                "remove it (keys come from the credentials file, region from kvceph_s3_region)",
            )
        if k not in allowed and k not in dropped:
            raise r.fail(
                "kvceph_lmcache_extra_config",
                k,
                f"is not read by LMCache {lmc}",
                f"use only {', '.join(sorted(allowed - managed))}",
            )
    for k in extra:
        if k not in dropped:
            _check_type(r, lmc, k, extra[k])
    if extra.get("save_chunk_meta", False):
        raise r.fail(
            "kvceph_lmcache_extra_config.save_chunk_meta",
            True,
            "LMCache's S3 connector requires it False",
            "set it False or drop it",
        )
    return LMCacheSettings(
        chunk_size=chunk,
        # The node's DRAM tier in front of S3: LMCache pins max_local_cpu_size anyway, and a
        # same-node repeat loaded from it took 0.065-0.09 x cold at 16k on the H200 where S3
        # took 0.58-0.70 x (issue 37). Every chunk is still written to S3 (cross-node, restart).
        local_cpu=r.bool("kvceph_lmcache_local_cpu", True),
        # LMCache pins this much RAM per worker even with local_cpu False (the seed's 100 GB at
        # TP=2 pins 200 GB); None: one max-length request per worker + headroom (kv_sizing).
        max_local_cpu_size=cpu,
        save_unfull_chunk=r.bool("kvceph_lmcache_save_unfull_chunk", False),
        enable_async_loading=r.bool("kvceph_lmcache_enable_async_loading", True),
        remote_serde=_serde(r),
        # None: derived from the longest request's KV and kvceph_kv_load_gb_per_s (kv_sizing).
        blocking_timeout_secs=r.opt_int("kvceph_lmcache_blocking_timeout_secs", lo=1),
        lookup_timeout_ms=r.opt_int("kvceph_lmcache_lookup_timeout_ms", lo=1),
        # builtin = Python hash(): depends on PYTHONHASHSEED *and* the Python minor version.
        hash_algorithm=r.choice(
            "kvceph_lmcache_hash_algorithm", "sha256_cbor", versions.HASH_ALGORITHMS
        ),
        extra_config=tuple(sorted((k, v) for k, v in extra.items() if k not in dropped)),
        dropped_keys=dropped,
        kv_bytes_per_token=kv_bytes,
        kv_source=kv_source,
        load_gb_per_s=_positive(
            r, "kvceph_kv_load_gb_per_s", kv_sizing.DEFAULT_LOAD_GB_PER_S, "0.7", "GB/s"
        ),
        prefill_tokens_per_s=crossover.fit_rates(tier.prefill_points).rate(engine.max_model_len),
        tier=tier,
    )
