"""kvceph's connector as an LMCache remote-storage plugin (LMCache 0.5.6 ConnectorAdapter).

lmcache.yaml loads it (never together with remote_url)::

    remote_storage_plugins: ["kvceph"]
    extra_config:
      remote_storage_plugin.kvceph.module_path: kvceph_connector.lmcache_plugin
      remote_storage_plugin.kvceph.class_name: KvcephConnectorAdapter
      kvceph.endpoint: "lmcache.s3.kvlab:443"   # <bucket>.<rgw_dns_name>[:port]
      kvceph.region: "us-east-1"
      kvceph.tls: true
      kvceph.connections: 16
      kvceph.timeout_s: 5.0
      kvceph.min_hit_tokens: 0
      kvceph.verify_crc32c: true              # the default: check each GET's crc32c
      kvceph.skip_short_puts: false            # opt-in: see "store" below
      kvceph.namespace: "kv/<fields>/"         # the names' folder (deploys/settings/namespace.py)
      save_chunk_meta: false

What LMCache calls (RemoteBackend, storage_manager, 0.5.6), and what each does here:
- lookup: ``batched_async_contains`` (async loading) and ``batched_contains`` (sync loading;
  RemoteBackend uses it because ``support_batched_contains`` is True): every HEAD at once, the
  contiguous hit prefix, 0 when it holds fewer than ``kvceph.min_hit_tokens`` tokens. LMCache
  skips a tier that reports 0 (storage_manager: ``if num_hit_chunks == 0: continue``), so no
  GET is sent; ``exists`` / ``exists_sync`` answer one key.
- load: ``batched_get_non_blocking`` (async) and ``batched_get`` (sync) with every GET in flight,
  the body copied straight into the MemoryObj LocalCPUBackend allocated, its size and (with
  ``kvceph.verify_crc32c``, the default) its crc32c checked before the object is returned; a
  failed chunk is released, never handed over, and a refused crc32c counted (s3core).
- store: ``put`` (one per chunk: RemoteBackend submits each); partial chunks are skipped as
  LMCache's own S3 connector does. InstrumentedRemoteConnector releases the MemoryObj after it.
  With ``kvceph.skip_short_puts`` (opt-in, admission.py) a chunk whose key this process saw only
  in lookups of fewer than min_hit_tokens' chunks is not stored either. Which processes see
  lookups (LMCache 0.5.6): vLLM's scheduler sends each lookup to the lookup server of every
  worker in ``lookup_server_worker_ids`` (default: all workers; worker 0 only with MLA,
  ``config.get_lookup_server_worker_ids``), whose StorageManager asks this connector -- the same
  instance that later receives that worker's puts. A worker without a lookup server (or the
  scheduler-side bypass lookup client) never records a key, so all its puts are stored.
  The hazard that keeps it off by default (docs/design.md): LMCache stores a request's chunks
  only after its whole LMCache hit, the node's DRAM tier included (``skip_leading_tokens`` =
  ``lmcache_cached_tokens``), and asks this connector only about the chunks after the DRAM
  hit; so a short prefix kept in DRAM is never put when a longer request extends it.
- ``remove_sync`` deletes; ``close`` closes the core.
"""

from __future__ import annotations

import asyncio
import math

from kvceph_connector import __version__
from kvceph_connector.versions import check_lmcache_version, lmcache_version

# Before any LMCache internals are imported: an unsupported release fails here, and LMCache logs
# "Failed to load remote connector kvceph due to import/attribute error: <this message>".
check_lmcache_version()

from lmcache.logging import init_logger  # noqa: E402
from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.memory_management import MemoryObj  # noqa: E402
from lmcache.v1.storage_backend.connector import (  # noqa: E402
    ConnectorAdapter,
    ConnectorContext,
    extract_plugin_type,
)
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector  # noqa: E402

from kvceph_connector.admission import PutAdmission  # noqa: E402
from kvceph_connector.s3core import S3Config, S3Core  # noqa: E402
from kvceph_connector.settings import settings_from_extra  # noqa: E402

# LMCache's handler on the package logger: the core's lines appear in LMCache's log format.
logger = init_logger("kvceph_connector")

PLUGIN = "kvceph"


class KvcephS3Connector(RemoteConnector):
    """LMCache's RemoteConnector over kvceph's S3 core (stock names, in kvceph.namespace).

    + loop: LMCache's event loop. + local_cpu_backend: allocates the MemoryObjs GETs fill.
    + s3: the S3Config. + min_hit_tokens: lookups below this hit length report 0.
    + skip_short_puts: no PUT for chunks seen only in lookups below min_hit_tokens.
    """

    def __init__(
        self,
        loop,
        local_cpu_backend,
        s3: S3Config,
        min_hit_tokens: int = 0,
        skip_short_puts: bool = False,
    ):
        super().__init__(local_cpu_backend.config, local_cpu_backend.metadata)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.core = S3Core(s3)
        self.chunk_size = int(local_cpu_backend.metadata.chunk_size)
        self.min_hit_tokens = int(min_hit_tokens)
        # LMCache's S3 holds only full chunks (puts of partial ones are skipped), so a hit of
        # n chunks is exactly n * chunk_size tokens.
        self.min_hit_chunks = math.ceil(self.min_hit_tokens / self.chunk_size)
        self.admission = PutAdmission.when(skip_short_puts, self.min_hit_chunks, log=logger)

    # -- lookups ---------------------------------------------------------------------------
    def _prefix(self, sizes: list[int | None]) -> int:
        hits = 0
        for size in sizes:
            if size is None:
                break
            hits += 1
        if 0 < hits < self.min_hit_chunks:
            logger.debug(
                "kvceph: %d hit chunks (%d tokens) below kvceph.min_hit_tokens %d: 0 reported",
                hits,
                hits * self.chunk_size,
                self.min_hit_tokens,
            )
            return 0
        return hits

    async def batched_async_contains(
        self, lookup_id: str, keys: list[CacheEngineKey], pin: bool = False
    ) -> int:
        """The contiguous hit prefix (chunks), 0 below the crossover; HEADs concurrent."""
        if not keys:
            return 0
        names = self._looked_up(keys)
        sizes = await asyncio.wrap_future(
            self.core.lookup_future(names, self.full_chunk_size_bytes)
        )
        return self._prefix(sizes)

    def _looked_up(self, keys: list[CacheEngineKey]) -> list[str]:
        """The keys' object names, recorded for put admission when it is on."""
        names = [k.to_string() for k in keys]
        if self.admission is not None:
            self.admission.looked_up(names)
        return names

    def support_batched_async_contains(self) -> bool:
        return True

    def batched_contains(self, keys: list[CacheEngineKey]) -> int:
        """Synchronous lookup (RemoteBackend.batched_contains): same answer as the async one."""
        if not keys:
            return 0
        return self._prefix(self.core.lookup(self._looked_up(keys), self.full_chunk_size_bytes))

    def support_batched_contains(self) -> bool:
        return True

    async def exists(self, key: CacheEngineKey) -> bool:
        sizes = await asyncio.wrap_future(
            self.core.lookup_future([key.to_string()], self.full_chunk_size_bytes)
        )
        return sizes[0] is not None

    def exists_sync(self, key: CacheEngineKey) -> bool:
        return self.core.lookup([key.to_string()], self.full_chunk_size_bytes)[0] is not None

    # -- loads -----------------------------------------------------------------------------
    def _allocate(self) -> MemoryObj | None:
        return self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt)

    async def _fetch(self, keys: list[CacheEngineKey]) -> list[MemoryObj | None]:
        """Every GET in flight at once into freshly allocated MemoryObjs; failures released."""
        objs: list[MemoryObj | None] = []
        for key in keys:
            obj = self._allocate()
            if obj is None:
                logger.warning(
                    "kvceph: LocalCPUBackend has no room for %s: loading %d of %d chunks",
                    key.to_string(),
                    len(objs),
                    len(keys),
                )
                break
            objs.append(obj)
        items = [
            (key.to_string(), obj.data_ptr, obj.get_size())
            for key, obj in zip(keys, objs, strict=False)
        ]
        ok: list[bool] = []
        if items:
            batch = self.core.get_many_into_future(items)
            try:
                ok = await asyncio.wrap_future(batch)
            except asyncio.CancelledError:
                # LMCache gave up (RemoteBackend's wait_for): stop the writes, free the buffers.
                self.core.abandon(batch)
                for obj in objs:
                    obj.ref_count_down()
                raise
        out: list[MemoryObj | None] = []
        for obj, good in zip(objs, ok, strict=True):
            if good:
                out.append(obj)
            else:
                obj.ref_count_down()
                out.append(None)
        return out + [None] * (len(keys) - len(out))

    async def get(self, key: CacheEngineKey) -> MemoryObj | None:
        return (await self._fetch([key]))[0]

    async def batched_get(self, keys: list[CacheEngineKey]) -> list[MemoryObj | None]:
        return await self._fetch(keys)

    def support_batched_get(self) -> bool:
        return True

    async def batched_get_non_blocking(
        self, lookup_id: str, keys: list[CacheEngineKey]
    ) -> list[MemoryObj]:
        """The loaded prefix only: chunks after the first failure are released, not returned."""
        objs = await self._fetch(keys)
        prefix: list[MemoryObj] = []
        for obj in objs:
            if obj is None:
                break
            prefix.append(obj)
        for obj in objs[len(prefix) :]:
            if obj is not None:
                obj.ref_count_down()
        return prefix

    def support_batched_get_non_blocking(self) -> bool:
        return True

    # -- stores ----------------------------------------------------------------------------
    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj):
        """One PutObject of a full chunk (InstrumentedRemoteConnector releases memory_obj)."""
        if memory_obj.get_size() != self.full_chunk_size_bytes:
            logger.debug(
                "kvceph: %s is a partial chunk (%d of %d bytes): not stored",
                key.to_string(),
                memory_obj.get_size(),
                self.full_chunk_size_bytes,
            )
            return
        name = key.to_string()
        if self.admission is not None and not self.admission.admit(name):
            return
        await asyncio.wrap_future(self.core.put_many_future([(name, memory_obj.byte_array)]))

    def support_batched_put(self) -> bool:
        return False

    def remove_sync(self, key: CacheEngineKey) -> bool:
        return self.core.delete([key.to_string()])[0]

    async def list(self) -> list[str]:
        raise NotImplementedError("kvceph's connector does not list the bucket")

    async def close(self):
        self.core.close()

    def __repr__(self) -> str:
        return f"<KvcephS3Connector {self.core.config.endpoint}>"


class KvcephConnectorAdapter(ConnectorAdapter):
    """The plugin's entry point (extra_config remote_storage_plugin.kvceph.class_name)."""

    def __init__(self) -> None:
        super().__init__(f"plugin://{PLUGIN}")

    def can_parse(self, url: str) -> bool:
        return url.startswith("plugin://") and (
            extract_plugin_type(url.removeprefix("plugin://")) == PLUGIN
        )

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        config = context.config
        if config is None or context.metadata is None:
            raise ValueError("kvceph's connector needs LMCache's config and metadata")
        s3, min_hit_tokens, skip_short_puts = settings_from_extra(config.extra_config)
        connector = KvcephS3Connector(
            context.loop,
            context.local_cpu_backend,
            s3,
            min_hit_tokens=min_hit_tokens,
            skip_short_puts=skip_short_puts,
        )
        logger.info(
            "kvceph connector %s ready for %s (LMCache %s): %s, %s://, %d connections, "
            "timeout %.1f s, min_hit_tokens %d%s, crc32c check %s",
            __version__,
            context.url,
            lmcache_version(),
            s3.endpoint,
            "https" if s3.tls else "http",
            s3.connections,
            s3.timeout_s,
            min_hit_tokens,
            (
                ", skip_short_puts"
                if connector.admission is not None
                else ", skip_short_puts idle (min_hit_tokens under 2 chunks)"
                if skip_short_puts
                else ""
            ),
            "on" if s3.verify_crc32c else "off",
        )
        return connector
