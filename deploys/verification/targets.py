"""Who verify.py talks to and how long it waits: the inference hosts as the controller reaches
them (:class:`Target`), which peer reads whose objects, and the run's bounds (:class:`Options`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from deploys.verification import bookkeeping


@dataclass(frozen=True)
class Target:
    """One inference host as the controller reaches it."""

    name: str
    base_url: str  # scheme://address:port, no trailing slash
    model: str
    tensor_parallel_size: int
    chunk_size: int
    save_unfull_chunk: bool
    health_timeout: int
    max_model_len: int
    # The `vllm serve` argument LMCache puts in its keys; "" when it is the model name (hub).
    serve_model: str = ""
    # kvceph_lmcache_connector; with "kvceph", lookups below min_hit_tokens report 0 hits.
    connector: str = "lmcache"
    min_hit_tokens: int = 0
    crossover: str = ""  # where min_hit_tokens came from (crossover.Crossover.describe())
    # kvceph.skip_short_puts: a document below the crossover writes no object at all.
    skip_short_puts: bool = False
    local_cpu: bool = False  # LMCache's DRAM tier (kvceph_lmcache_local_cpu): the DRAM step
    # What names the chunks' objects (object_names.py): pre_caching_hash_algorithm, the
    # engine's PYTHONHASHSEED (never printed: the secret seed where there is one), the KV dtype.
    hash_algorithm: str = "sha256_cbor"
    hash_seed: int | None = field(default=None, repr=False)
    kv_dtype: str = "bfloat16"
    # kvceph.namespace: the folder kvceph's connector names its objects in ("": bucket root).
    namespace: str = ""
    # LMCache MP mode (kvceph_engine_profile.mode mp): the host's server holds L1 (mp.py).
    mp: bool = False
    mp_prefix: str = ""  # render.mp_prefix: kvceph's name prefix before LMCache's MP key

    @property
    def key_model(self) -> str:
        """The model as LMCache's keys name it (the ``vllm serve`` argument)."""
        return self.serve_model or self.model

    @property
    def prefix(self) -> str:
        return bookkeeping.object_prefix(self.key_model, self.tensor_parallel_size, self.namespace)

    @property
    def host(self) -> str:
        """The host the engine runs on (names are ``host`` or ``host/engine``)."""
        return self.name.split("/", 1)[0]


def peers_of(a: Target, healthy: list[Target]) -> list[Target]:
    """Who must load A's chunks: another engine on A's host, and one on another host (each
    when there is one): reuse inside a host and across hosts are both proved."""
    same = [t for t in healthy if t.host == a.host and t.name != a.name]
    other = [t for t in healthy if t.host != a.host]
    return same[:1] + other[:1]


@dataclass(frozen=True)
class Options:
    """The figures of VerifySettings the cycle needs (kept separate: tests build it by hand)."""

    document_tokens: int = 16384
    output_tokens: int = 32
    warm_ratio: float = 1.0
    dram_ratio: float = 0.15
    fallback_tolerance: float = 0.5
    request_timeout: int = 600
    restart_timeout: int = 360
    s3_timeout: float = 30
    objects_timeout: float = 120
    cleanup: bool = True
    router_only: bool = False  # the router step alone (deploys/verification/routed.py)
    poll_interval: float = 1.0

    @classmethod
    def from_settings(cls, vs) -> Options:
        """Every figure from VerifySettings ``vs`` under its own name (poll_interval: tests')."""
        return cls(
            **{f.name: getattr(vs, f.name) for f in fields(cls) if f.name != "poll_interval"}
        )


# --- The cycle ------------------------------------------------------------------------------
