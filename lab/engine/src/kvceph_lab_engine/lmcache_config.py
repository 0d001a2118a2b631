"""Load the LMCache config with LMCache 0.5.6's own loader, as the vLLM integration does.

lmcache/integration/vllm/utils.py lmcache_get_or_create_config():
- LMCACHE_CONFIG_FILE set: LMCacheEngineConfig.from_file(path) then update_config_from_env()
  (LMCACHE_<KEY> variables override the file; unknown keys are only logged; validate() runs).
- unset: a warning, then LMCacheEngineConfig.from_env() + validate() -- no refusal.
A missing/unreadable file or a value the loader cannot convert raises -> the engine refuses.
Importing lmcache.v1.config needs only pyyaml, requests (+urllib3, idna, certifi,
charset-normalizer); lmcache is installed with --no-deps (no torch).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

log = logging.getLogger("kvceph_lab_engine.lmcache")


class ConfigError(RuntimeError):
    """LMCache would refuse this configuration (vLLM's engine core then dies)."""


@dataclass
class LMCacheView:
    """The parts of LMCacheEngineConfig the emulation uses."""

    source: str
    chunk_size: int = 256
    remote_url: str | None = None
    remote_storage_plugins: list[str] = field(default_factory=list)
    save_unfull_chunk: bool = False
    pre_caching_hash_algorithm: str = "builtin"
    local_cpu: bool = True
    max_local_cpu_size: float = 5.0
    remote_serde: str | None = "naive"
    extra_config: dict = field(default_factory=dict)
    enable_async_loading: bool = False
    lookup_timeout_ms: int = 3000
    blocking_timeout_secs: int = 10


def _quiet_lmcache_torch_warnings() -> None:
    # lmcache logs "load torch failed" at import time when torch is absent; that is expected
    # here and would only confuse operators reading the journal.
    class _F(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            msg = record.getMessage()
            return "torch" not in msg and "CLI-only mode" not in msg

    for name in ("lmcache", "lmcache.v1.platform._device_detect"):
        logging.getLogger(name).addFilter(_F())


def load(environ: dict[str, str] | None = None) -> LMCacheView:
    environ = dict(os.environ if environ is None else environ)
    try:
        from lmcache.v1.config import LMCacheEngineConfig
    except Exception as exc:  # noqa: BLE001 - report anything the import raises
        raise ConfigError(
            f"cannot import lmcache.v1.config ({type(exc).__name__}: {exc}); install "
            "lmcache==0.5.6 --no-deps with pyyaml requests urllib3 idna certifi "
            "charset-normalizer"
        ) from exc
    path = environ.get("LMCACHE_CONFIG_FILE")
    try:
        if path is None:
            log.warning(
                "No LMCache configuration file is set. Trying to read configurations from "
                "the environment variables."
            )
            cfg = LMCacheEngineConfig.from_env()
            cfg.validate()
            source = "environment"
        else:
            log.info("Loading LMCache config file %s", path)
            if not os.access(path, os.R_OK):
                raise ConfigError(f"LMCACHE_CONFIG_FILE={path}: file missing or not readable")
            cfg = LMCacheEngineConfig.from_file(path)
            cfg.update_config_from_env()
            source = path
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - LMCache raises many kinds
        raise ConfigError(f"LMCache rejected its config ({type(exc).__name__}: {exc})") from exc
    extra = cfg.extra_config if cfg.extra_config is not None else {}
    view = LMCacheView(
        source=source,
        chunk_size=int(cfg.chunk_size),
        remote_url=cfg.remote_url,
        remote_storage_plugins=list(cfg.remote_storage_plugins or []),
        save_unfull_chunk=bool(cfg.save_unfull_chunk),
        pre_caching_hash_algorithm=str(cfg.pre_caching_hash_algorithm or "builtin"),
        local_cpu=bool(cfg.local_cpu),
        max_local_cpu_size=float(cfg.max_local_cpu_size or 0),
        remote_serde=cfg.remote_serde,
        extra_config=dict(extra),
        enable_async_loading=bool(cfg.enable_async_loading),
        lookup_timeout_ms=int(cfg.lookup_timeout_ms),
        blocking_timeout_secs=int(cfg.blocking_timeout_secs),
    )
    if view.chunk_size <= 0:
        raise ConfigError(f"chunk_size must be positive, got {view.chunk_size}")
    return view


_quiet_lmcache_torch_warnings()
