"""The remote tier the way kvceph's LMCache plugin runs it: kvceph_connector.s3core.S3Core.

Used when lmcache.yaml says ``remote_storage_plugins: ["kvceph"]`` (s3.py keeps emulating the
stock connector, breaker included, for ``remote_url``). The core is the plugin's own, not a copy;
this module only does what LMCache 0.5.6 + kvceph_connector.lmcache_plugin do around it:
- loading: ConnectorManager imports ``remote_storage_plugin.kvceph.module_path`` and
  ``.class_name``; any failure (module missing, unsupported LMCache, a bad kvceph.* key) is
  logged with LMCache's lines and the engine serves with no remote tier (RemoteBackend keeps
  ``connection = None``), while LMCache still logs "Created remote backend for plugin: kvceph";
- lookups: every HEAD of the remaining chunks at once, the contiguous prefix, 0 below
  ``kvceph.min_hit_tokens`` (no GET then);
- loads: GETs into buffers, size and crc32c checked by the core (a refused crc32c is a miss,
  counted and logged by the core at most once a minute); puts: one PutObject each,
  none for a key seen only in lookups below the crossover when ``kvceph.skip_short_puts`` is on
  (the plugin's own PutAdmission; one for every TP worker: their key names differ by worker).
"""

from __future__ import annotations

import logging
import math

lmcache_log = logging.getLogger("kvceph_lab_engine.lmcache")

PLUGIN = "kvceph"
MODULE = "kvceph_connector.lmcache_plugin"
CLASS = "KvcephConnectorAdapter"


def create(extra: dict, chunk_size: int):
    """A KvcephStore, or None after logging LMCache's failure lines (no remote tier).

    + extra: LMCache's extra_config. + chunk_size: LMCache's chunk_size (tokens).
    """
    lmcache_log.info("Creating RemoteBackend for plugin: %s", PLUGIN)
    store = None
    module = extra.get(f"remote_storage_plugin.{PLUGIN}.module_path")
    klass = extra.get(f"remote_storage_plugin.{PLUGIN}.class_name")
    try:
        if not module or not klass:
            lmcache_log.warning(
                "Remote connector %s missing adapter module_path or class_name", PLUGIN
            )
            raise ValueError(f"No adapter found for URL: plugin://{PLUGIN}")
        try:
            if module != MODULE or klass != CLASS:
                # The real import would find nothing else kvceph ships.
                raise ImportError(f"No module named {module!r}" if module != MODULE else klass)
            from kvceph_connector import versions
            from kvceph_connector.s3core import S3Core
            from kvceph_connector.settings import settings_from_extra as _  # noqa: F401

            versions.check_lmcache_version()
        except ImportError as exc:
            lmcache_log.error(
                "Failed to load remote connector %s due to import/attribute error: %s",
                PLUGIN,
                exc,
            )
            raise ValueError(f"No adapter found for URL: plugin://{PLUGIN}") from exc
        store = KvcephStore(S3Core, extra, chunk_size)
        lmcache_log.info("Connection initialized/re-established at plugin://%s", PLUGIN)
    except ValueError as exc:
        lmcache_log.warning("Failed to initialize/re-establish remote connection: %s", exc)
    lmcache_log.info("Created remote backend for plugin: %s", PLUGIN)
    return store


class KvcephStore:
    """The engine's store interface (head / prefix_hits / get_many / put_many) over S3Core."""

    disabled = False  # no breaker: the core backs off and comes back by itself

    def __init__(self, core_class, extra: dict, chunk_size: int):
        from kvceph_connector.admission import PutAdmission
        from kvceph_connector.settings import settings_from_extra

        config, self.min_hit_tokens, skip_short_puts = settings_from_extra(extra)
        self.core = core_class(config)
        self.chunk_size = chunk_size
        min_hit_chunks = math.ceil(self.min_hit_tokens / chunk_size)
        self.admission = PutAdmission.when(skip_short_puts, min_hit_chunks, log=lmcache_log)
        lmcache_log.info(
            "kvceph connector ready for plugin://%s: %s, %s://, %d connections, "
            "timeout %.1f s, min_hit_tokens %d%s, crc32c check %s",
            PLUGIN,
            config.endpoint,
            "https" if config.tls else "http",
            config.connections,
            config.timeout_s,
            self.min_hit_tokens,
            (
                ", skip_short_puts"
                if self.admission is not None
                else ", skip_short_puts idle (min_hit_tokens under 2 chunks)"
                if skip_short_puts
                else ""
            ),
            "on" if config.verify_crc32c else "off",
        )

    def head(self, key: str) -> int:
        return self.core.lookup([key])[0] or 0

    def prefix_hits(self, chunk_keys: list[list[str]], sizes: list[int]) -> int:
        """Leading chunks whose every worker's object has the expected size; 0 below the
        crossover (kvceph.min_hit_tokens), as the plugin's batched_async_contains.

        + chunk_keys: per chunk, its object names (one per worker). + sizes: bytes per chunk.
        """
        if self.admission is not None:
            # Each worker's connector is asked about its own keys, as many as there are chunks.
            for column in zip(*chunk_keys, strict=True):
                self.admission.looked_up(list(column))
        flat = [k for keys in chunk_keys for k in keys]
        found = iter(self.core.lookup(flat)) if flat else iter(())
        hits = 0
        for keys, want in zip(chunk_keys, sizes, strict=True):
            if not all(next(found) == want for _ in keys):
                break
            hits += 1
        if 0 < hits * self.chunk_size < self.min_hit_tokens:
            return 0
        return hits

    def get_many(self, keys: list[str], sizes: list[int] | None = None) -> list[bytes | None]:
        if sizes is None:
            sizes = [self.head(k) for k in keys]
        bufs = [bytearray(n) for n in sizes]
        ok = self.core.get_many_into(list(zip(keys, bufs, sizes, strict=True)))
        return [bytes(b) if good else None for b, good in zip(bufs, ok, strict=True)]

    def put_many(self, items: list[tuple[str, bytes]]) -> list[bool]:
        """PUT each; a put admission skips (True: the plugin's put returns as if done)."""
        if self.admission is None:
            return self.core.put_many(items)
        admitted = [self.admission.admit(k) for k, _ in items]
        stored = iter(
            self.core.put_many([it for it, ok in zip(items, admitted, strict=True) if ok])
        )
        return [next(stored) if ok else True for ok in admitted]
