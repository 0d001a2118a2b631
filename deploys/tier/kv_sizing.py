"""KV cache sizes, LMCache buffer and timeouts, derived from the model's shape and the host.

Pure module (no pyinfra, no settings import): the LMCache config, the preflight RAM check, the
bandwidth probe and the hardware proofs all take their arithmetic from here.

KV bytes per token, per tensor-parallel worker (what one LMCache worker stores and loads)::

    layers x KV heads on the worker x head_dim x 2 (K and V) x dtype bytes

where a worker holds ``max(1, kv_heads // tp)`` KV heads (vLLM replicates heads when TP exceeds
them). Architectures whose KV is not that product (MLA, hybrid attention / state-space layers)
are refused: a wrong size would make every derived buffer and timeout wrong.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30

# vLLM --kv-cache-dtype values kvceph passes (settings: kvceph_kv_dtype) -> bytes per element.
DTYPE_BYTES = {"bfloat16": 2, "fp8": 1}

# LMCache 0.5.6's own defaults (lmcache/v1/config.py): derived timeouts never go below them.
LMCACHE_DEFAULT_LOOKUP_TIMEOUT_MS = 3000
LMCACHE_DEFAULT_BLOCKING_TIMEOUT_SECS = 10

# A max-length request must fit the pinned buffer with this much to spare: chunks are allocated
# whole (a partial last chunk takes a full block) and stores of other requests share the buffer.
CPU_HEADROOM = 1.25
# Timeouts allow this multiple of the load time at the conservative bandwidth.
TIMEOUT_MARGIN = 1.5
# Preflight: every engine's pinned buffers together may take at most this share of MemTotal.
PINNED_RAM_FRACTION = 0.5

# Conservative S3 load bandwidth (GB/s = 1e9 bytes/s, per host, all workers together): LMCache
# loaded 0.70-0.91 GB/s from one radosgw on an H200 host (docs/procedure.md, "Pinned memory").
DEFAULT_LOAD_GB_PER_S = 0.7
# Flat cold prefill rates (tokens/s): only the default of settings built by hand in tests.
# Deployments take the length-dependent figure of deploys/tier/crossover.py (DEFAULT_PREFILL, or
# kvceph_prefill_tokens_per_s), evaluated at the longest request.
DEFAULT_PREFILL_TOKENS_PER_S = {"nvidia": 5000.0, "gaudi": 2000.0}


class SizingError(ValueError):
    """The model's KV size cannot be derived; the message says what to set."""


@dataclass(frozen=True)
class ModelShape:
    """What the KV size depends on: decoder layers, KV heads, head dimension; and the native
    context (deploys/context_length.py), None where unknown (a shape read from config.json)."""

    layers: int
    kv_heads: int
    head_dim: int
    native_len: int | None = field(default=None, compare=False)


# Known models: (layers, KV heads, head_dim) from each model's config.json. head_dim is the
# explicit field where the model has one (Qwen3-32B: 128, not hidden_size / heads = 80).
# native_len: the longest --max-model-len vLLM starts with on the published config.json
# (max_position_embeddings; Llama 3.x's built-in llama3 rope scaling does not extend it):
# Qwen3 needs YaRN for more than 40960.
KNOWN_MODELS: dict[str, ModelShape] = {
    "Qwen/Qwen3-8B": ModelShape(36, 8, 128, native_len=40960),
    "Qwen/Qwen3-14B": ModelShape(40, 8, 128, native_len=40960),
    "Qwen/Qwen3-32B": ModelShape(64, 8, 128, native_len=40960),
    "meta-llama/Llama-3.1-8B-Instruct": ModelShape(32, 8, 128, native_len=131072),
    "meta-llama/Llama-3.3-70B-Instruct": ModelShape(80, 8, 128, native_len=131072),
}
# Known models whose KV is not layers x heads x head_dim: refused, never guessed.
REFUSED_MODELS = {
    "deepseek-ai/DeepSeek-V3": "multi-head latent attention (MLA)",
    "deepseek-ai/DeepSeek-R1": "multi-head latent attention (MLA)",
    "moonshotai/Kimi-K2-Instruct": "multi-head latent attention (MLA)",
    "Qwen/Qwen3-Next-80B-A3B-Instruct": "hybrid attention (linear + full layers)",
}
# config.json model_type values of the same kinds.
_REFUSED_TYPES = {
    "deepseek_v2": "multi-head latent attention (MLA)",
    "deepseek_v3": "multi-head latent attention (MLA)",
    "kimi_k2": "multi-head latent attention (MLA)",
    "qwen3_next": "hybrid attention (linear + full layers)",
    "jamba": "hybrid attention (state-space + attention layers)",
    "bamba": "hybrid attention (state-space + attention layers)",
    "falcon_h1": "hybrid attention (state-space + attention layers)",
    "nemotron_h": "hybrid attention (state-space + attention layers)",
    "granitemoehybrid": "hybrid attention (state-space + attention layers)",
}


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str, tensor_parallel_size: int = 1) -> int:
    """KV bytes one tensor-parallel worker holds per token.

    + shape: the model's layers, KV heads and head dimension
    + kv_dtype: vLLM's --kv-cache-dtype (``bfloat16`` or ``fp8``)
    + tensor_parallel_size: workers the heads are split over (heads replicate beyond their count)

    Qwen3-32B bf16 TP 1: 64 x 8 x 128 x 2 x 2 = 262,144 bytes.
    """
    if kv_dtype not in DTYPE_BYTES:
        raise SizingError(f"KV dtype {kv_dtype!r} unknown; use one of {', '.join(DTYPE_BYTES)}")
    if tensor_parallel_size < 1:
        raise SizingError(f"tensor-parallel size {tensor_parallel_size} must be >= 1")
    heads = max(1, shape.kv_heads // tensor_parallel_size)
    return shape.layers * heads * shape.head_dim * 2 * DTYPE_BYTES[kv_dtype]


def refusal(model: str) -> str | None:
    """Why a known model's KV cannot be sized this way, or None."""
    return REFUSED_MODELS.get(model)


def shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    """The KV shape from a Hugging Face ``config.json``; SizingError for MLA / hybrid models.

    + config: the parsed config.json (a multimodal model's ``text_config`` is used when present)
    """
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else None
    c: Mapping[str, Any] = text or config
    kind = str(c.get("model_type") or config.get("model_type") or "")
    if kind in _REFUSED_TYPES:
        raise SizingError(f"model_type {kind}: {_REFUSED_TYPES[kind]}")
    if c.get("kv_lora_rank") is not None:
        raise SizingError("kv_lora_rank is set: multi-head latent attention (MLA)")
    layer_types = c.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        other = sorted({str(t) for t in layer_types} - {"full_attention"})
        raise SizingError(f"layer_types has {', '.join(other)}: hybrid attention")
    for key in ("layers_block_type", "hybrid_override_pattern", "attn_layer_indices"):
        if c.get(key) is not None:
            raise SizingError(f"{key} is set: hybrid attention (state-space layers)")
    try:
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads") or heads)
        head_dim = c.get("head_dim")
        head_dim = int(head_dim) if head_dim else int(c["hidden_size"]) // heads
    except (KeyError, TypeError, ValueError) as exc:
        raise SizingError(f"config.json lacks {exc} (num_hidden_layers, heads, head_dim)") from None
    if min(layers, kv_heads, head_dim) < 1:
        raise SizingError(f"config.json shape {layers}x{kv_heads}x{head_dim} is not positive")
    return ModelShape(layers, kv_heads, head_dim)


@dataclass(frozen=True)
class Sizing:
    """What one engine's LMCache config needs for its longest request."""

    kv_bytes_per_token: int  # per worker
    tensor_parallel_size: int
    max_tokens: int  # the longest request, rounded up to whole chunks
    load_gb_per_s: float
    prefill_tokens_per_s: float

    @property
    def request_bytes_per_worker(self) -> int:
        return self.max_tokens * self.kv_bytes_per_token

    @property
    def request_bytes(self) -> int:
        """All workers' KV of the longest request: what the host loads from S3."""
        return self.request_bytes_per_worker * self.tensor_parallel_size

    @property
    def cpu_gib(self) -> float:
        """max_local_cpu_size (GiB per worker): the longest request + headroom, 1/1000 GiB up."""
        return math.ceil(self.request_bytes_per_worker * CPU_HEADROOM * 1000 / GIB) / 1000

    @property
    def load_seconds(self) -> float:
        """Time to load the longest request at the conservative bandwidth."""
        return self.request_bytes / (self.load_gb_per_s * 1e9)

    @property
    def prefill_seconds(self) -> float:
        """Cold prefill time of the longest request."""
        return self.max_tokens / self.prefill_tokens_per_s

    @property
    def lookup_timeout_ms(self) -> int:
        """LMCache's async lookup gives up after this: a max-length load with margin, at most
        that request's recompute (a slow tier then costs at most one prefill more)."""
        ms = max(
            LMCACHE_DEFAULT_LOOKUP_TIMEOUT_MS, math.ceil(self.load_seconds * TIMEOUT_MARGIN * 1000)
        )
        return min(ms, math.ceil(self.prefill_seconds * 1000))

    @property
    def blocking_timeout_secs(self) -> int:
        """LMCache's synchronous S3 get gives up after this (same load and cap, whole seconds,
        at least 1: LMCache reads an integer)."""
        secs = max(
            LMCACHE_DEFAULT_BLOCKING_TIMEOUT_SECS, math.ceil(self.load_seconds * TIMEOUT_MARGIN)
        )
        return max(1, min(secs, math.ceil(self.prefill_seconds)))

    def tokens_fitting(self, cpu_gib: float) -> int:
        """The longest request (tokens) whose KV fits a buffer of ``cpu_gib`` per worker."""
        return int(cpu_gib * GIB // self.kv_bytes_per_token)

    def tokens_loadable(self, timeout_s: float) -> int:
        """The longest request (tokens) loadable within ``timeout_s`` at the bandwidth."""
        per_token = self.kv_bytes_per_token * self.tensor_parallel_size
        return int(timeout_s * self.load_gb_per_s * 1e9 // per_token)


def derive(
    *,
    kv_bytes_per_token: int,
    tensor_parallel_size: int,
    max_model_len: int,
    chunk_size: int,
    load_gb_per_s: float = DEFAULT_LOAD_GB_PER_S,
    prefill_tokens_per_s: float,
) -> Sizing:
    """Sizing for requests up to ``max_model_len`` tokens (rounded up to whole chunks).

    + kv_bytes_per_token: per worker (``kv_bytes_per_token()``)
    + tensor_parallel_size: workers per engine
    + max_model_len: the longest request the engine accepts
    + chunk_size: LMCache tokens per chunk
    + load_gb_per_s: conservative S3 load bandwidth of the host (GB/s)
    + prefill_tokens_per_s: the engine's cold prefill rate
    """
    chunks = math.ceil(max_model_len / chunk_size)
    return Sizing(
        kv_bytes_per_token=kv_bytes_per_token,
        tensor_parallel_size=tensor_parallel_size,
        max_tokens=chunks * chunk_size,
        load_gb_per_s=load_gb_per_s,
        prefill_tokens_per_s=prefill_tokens_per_s,
    )


def pinned_ram_fits(pinned_bytes: int, mem_total: int) -> bool:
    """The README's rule: all engines' pinned buffers <= PINNED_RAM_FRACTION x MemTotal."""
    return pinned_bytes <= PINNED_RAM_FRACTION * mem_total


# --- One inference host (``me``: a deploys.settings.HostSettings with engine and lmcache) ------


def for_host(me) -> Sizing:
    """The sizing of ``me``'s engine; SizingError while its KV size is still unknown."""
    e, lmc = me.engine, me.lmcache
    if lmc.kv_bytes_per_token is None:
        raise SizingError(f"{me.host}: KV size of {e.model} not resolved yet ({lmc.kv_source})")
    return derive(
        kv_bytes_per_token=lmc.kv_bytes_per_token,
        tensor_parallel_size=e.tensor_parallel_size,
        max_model_len=e.max_model_len,
        chunk_size=lmc.chunk_size,
        load_gb_per_s=lmc.load_gb_per_s,
        prefill_tokens_per_s=lmc.prefill_tokens_per_s,
    )


@dataclass(frozen=True)
class Limits:
    """The values lmcache.yaml gets: the operator's where set, else the derived ones."""

    max_local_cpu_size: float  # GiB per worker
    lookup_timeout_ms: int
    blocking_timeout_secs: int


def limits(me) -> Limits:
    """What ``me``'s lmcache.yaml holds."""
    lmc, s = me.lmcache, for_host(me)
    return Limits(
        max_local_cpu_size=lmc.max_local_cpu_size or s.cpu_gib,
        lookup_timeout_ms=lmc.lookup_timeout_ms or s.lookup_timeout_ms,
        blocking_timeout_secs=lmc.blocking_timeout_secs or s.blocking_timeout_secs,
    )


def chunk_bytes(me) -> int:
    """Bytes of one LMCache object of ``me``: chunk_size x KV bytes per token per worker.

    LMCache's S3 connector refuses any other size (``s3_part_size`` = a full chunk).
    """
    return me.lmcache.chunk_size * for_host(me).kv_bytes_per_token


def pinned_alloc_bytes(cpu_gib: float) -> int:
    """RAM one worker's buffer of ``cpu_gib`` really pins: the next power of two of its bytes.

    + cpu_gib: max_local_cpu_size

    LMCache's torch fallback takes the buffer as ``torch.empty(pin_memory=True)``, and PyTorch's
    host allocator rounds every block up to a power of two: on the H200 ``max_local_cpu_size:
    40`` pinned 64 GiB (67.7 GB of shared memory in the OOM record, hw/h200/README.md) and 31.5
    pinned 32. 6.25 GiB pins 8.
    """
    n = int(cpu_gib * GIB)
    return 1 << max(0, n - 1).bit_length()


def pinned_bytes(me) -> int:
    """Pinned RAM of ``me``'s engine: every worker's buffer, as PyTorch rounds it."""
    return pinned_alloc_bytes(limits(me).max_local_cpu_size) * me.engine.tensor_parallel_size


def refusal_for(me) -> str | None:
    """A one-line refusal for settings that kill the engine, or None.

    Synchronous loading with a buffer smaller than the longest request: LMCache's retrieve
    waits blocking_timeout_secs for memory that never frees, and vLLM's engine dies (recipe:
    CUDA illegal memory access -> EngineDeadError).
    """
    s, lim = for_host(me), limits(me)
    if me.lmcache.enable_async_loading or lim.max_local_cpu_size >= s.cpu_gib:
        return None
    return (
        f"{me.host}: kvceph_lmcache_max_local_cpu_size = {lim.max_local_cpu_size!r}: below "
        f"{s.cpu_gib} GiB, one {s.max_tokens}-token request per worker + headroom, with "
        "synchronous loading: a longer load fails its allocations and vLLM's engine dies; "
        "fix: remove the setting (derived) or raise it"
    )


def warnings(me) -> list[str]:
    """Plan warnings: overrides below what the longest request needs; a tier that cannot pay."""
    s, lim, lmc = for_host(me), limits(me), me.lmcache
    out = []
    host = me.host
    if lim.max_local_cpu_size < s.cpu_gib:
        fits = s.tokens_fitting(lim.max_local_cpu_size)
        out.append(
            f"{host}: kvceph_lmcache_max_local_cpu_size {lim.max_local_cpu_size:g} GiB is below "
            f"the derived {s.cpu_gib} GiB: requests over ~{fits} tokens fail LMCache's "
            "allocations ('Failed to allocate memory block') and recompute"
        )
    if lmc.enable_async_loading and lim.lookup_timeout_ms < s.lookup_timeout_ms:
        out.append(
            f"{host}: kvceph_lmcache_lookup_timeout_ms {lim.lookup_timeout_ms} is below the "
            f"derived {s.lookup_timeout_ms}: at {s.load_gb_per_s:g} GB/s requests over "
            f"~{s.tokens_loadable(lim.lookup_timeout_ms / 1000)} tokens give up the lookup "
            "('is still waiting for async lookup') and recompute"
        )
    if not lmc.enable_async_loading and lim.blocking_timeout_secs < s.blocking_timeout_secs:
        out.append(
            f"{host}: kvceph_lmcache_blocking_timeout_secs {lim.blocking_timeout_secs} is below "
            f"the derived {s.blocking_timeout_secs}: at {s.load_gb_per_s:g} GB/s requests over "
            f"~{s.tokens_loadable(lim.blocking_timeout_secs)} tokens time out their load"
        )
    if s.load_seconds > s.prefill_seconds:
        out.append(
            f"{host}: loading a {s.max_tokens}-token request ({s.request_bytes / 1e9:.2f} GB of "
            f"KV) at {s.load_gb_per_s:g} GB/s (kvceph_kv_load_gb_per_s) takes "
            f"{s.load_seconds:.1f} s, longer than its cold prefill ({s.prefill_seconds:.1f} s at "
            f"{s.prefill_tokens_per_s:g} tokens/s, kvceph_prefill_tokens_per_s): the S3 tier "
            f"cannot pay at that length (it pays above "
            f"{s.request_bytes / s.prefill_seconds / 1e9:.2f} GB/s)"
        )
    return out
