"""The emulated vLLM engine core + LMCache connector: prefix lookup, load, prefill, store.

Per request (mirrors vLLM's scheduler + LMCacheConnectorV1 in LMCache 0.5.6):
1. local prefix cache (vLLM's GPU prefix caching, 16-token blocks, in-process only);
2. LMCache lookup: chunk keys in prefix order, HEAD every TP worker's object, stop at the
   first miss (local CPU tier first when local_cpu is true);
   if every prompt token hits, vLLM still recomputes the last token;
3. load the hit chunks beyond the local hit: GET each worker's object (real transfer time,
   no faster than the lab's simulated S3 bandwidth); a failed GET (missing, or refused by the
   connector: size, crc32c) -> recompute (kv_load_failure_policy=recompute) or fail the request
   ("fail", vLLM's default). The bytes are not checked, as LMCache and vLLM do not: the answer
   is drawn from them (answer.py), so a wrong body gives a wrong answer, as on a GPU.
   The load is bounded as LMCache bounds it (``LoadLimits``): every chunk needs a block of
   LMCache's pinned CPU buffer (max_local_cpu_size per worker) and a load larger than the
   buffer busy-waits for memory; asynchronous loading gives up after lookup_timeout_ms and
   reports 0 hits (vLLM recomputes), synchronous loading waits blocking_timeout_secs and, when
   memory never came, vLLM's engine dies (EngineDeadError);
4. simulated prefill: sleep prefill_ms_per_token x computed tokens;
5. store: PUT the chunks LMCache did not find (full chunks only unless save_unfull_chunk;
   the S3 connector itself refuses partial chunks), one object per TP worker;
6. answer: tokens drawn from the prompt and the KV bytes of every chunk the request held
   (answer.py): computed, from vLLM's prefix cache (the bytes an earlier request held), from
   the DRAM tier or loaded from S3.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from kvceph_lab_engine import answer
from kvceph_lab_engine.hashing import ChunkHasher, object_name

log = logging.getLogger("kvceph_lab_engine.engine")
# LMCache's own lines, word for word (verify.py recognises them in the journal).
lmcache_log = logging.getLogger("kvceph_lab_engine.lmcache")

VLLM_BLOCK_SIZE = 16


# The bytes a prefill computes for one worker's chunk (answer.chunk_payload).
object_payload = answer.chunk_payload


class LoadFailed(RuntimeError):
    """KV load failed and kv_load_failure_policy is 'fail'."""


class EngineDead(RuntimeError):
    """vLLM's engine core died (EngineDeadError): every later request fails, /health is 503."""


# LMCache 0.5.6's busy loop retries a failed allocation every 0.1 s (local_cpu_backend.py).
ALLOC_RETRY_SECONDS = 0.1
# A chunk in the node's DRAM tier (local_cpu) loads this many times faster than from S3: on the
# H200 a same-node repeat took 0.18-0.26 s from DRAM against 1.64-2.07 s from S3 at 16k tokens
# and 0.26 against 2.88-3.03 s at 32k (11-24x, issue 37); the lab takes the low end.
DRAM_SPEEDUP = 10.0


def transfer_seconds(s3_bytes: int, dram_bytes: int, tp: int, s3_bytes_per_s: float) -> float:
    """The simulated time of a load: S3 chunks at the lab's bandwidth (all workers together),
    DRAM chunks DRAM_SPEEDUP times faster.

    + s3_bytes, dram_bytes: one worker's bytes from each tier
    + tp: workers
    + s3_bytes_per_s: the simulated S3 bandwidth of the host
    """
    return (s3_bytes + dram_bytes / DRAM_SPEEDUP) * tp / s3_bytes_per_s


@dataclass(frozen=True)
class LoadLimits:
    """What bounds a load: lmcache.yaml's values, and the lab's simulated S3 bandwidth.

    LMCache 0.5.6 defaults: max_local_cpu_size 5 GiB, enable_async_loading false,
    lookup_timeout_ms 3000, blocking_timeout_secs 10.
    """

    cpu_buffer_bytes: int = 5 << 30  # per worker: LMCache pins it even with local_cpu false
    async_loading: bool = False
    lookup_timeout_ms: int = 3000
    blocking_timeout_secs: int = 10
    # Lab only: loads take at least bytes / this (the S3 path of a real host, scaled to the
    # lab's KV sizes; lab/engine/README.md). None: as fast as the lab's RGW answers.
    load_bytes_per_s: float | None = None


@dataclass
class PrefillResult:
    prompt_tokens: int
    local_hit: int
    external_hit: int  # tokens LMCache found (lookup), before vLLM's last-token rule
    claimed: int  # tokens the connector reported to vLLM's scheduler (external hits stat)
    loaded: int  # tokens whose KV came from LMCache (external_kv_transfer)
    computed: int
    load_seconds: float
    prefill_seconds: float
    keys_hit: int
    # One digest per chunk and worker, in prefix order: the KV the answer is drawn from.
    kv: tuple[bytes, ...] = ()
    dram_loaded: int = 0  # of ``loaded``: tokens whose chunks came from the DRAM tier
    remote_read_bytes: int = 0  # all workers' bytes GET from S3 (lmcache:num_remote_read_bytes)


class LocalPrefixCache:
    """vLLM's in-GPU prefix cache, reduced to an LRU set of chained 16-token block hashes.

    A request's ``cache_salt`` joins the first block's hash (vLLM's extra keys of block 0), so
    every block of a salted request differs from the same tokens unsalted or salted otherwise.
    LMCache 0.5.6's LMCacheConnectorV1 hashes tokens only: its chunks hit whatever the salt.
    """

    def __init__(self, capacity_tokens: int):
        self.capacity_blocks = capacity_tokens // VLLM_BLOCK_SIZE  # 0: prefix caching off
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _hashes(tokens: list[int], salt: str | None = None) -> list[bytes]:
        out, prev = [], hashlib.sha256(salt.encode()).digest() if salt else b""
        for i in range(0, len(tokens) - len(tokens) % VLLM_BLOCK_SIZE, VLLM_BLOCK_SIZE):
            prev = hashlib.sha256(prev + repr(tokens[i : i + VLLM_BLOCK_SIZE]).encode()).digest()
            out.append(prev)
        return out

    def hit_tokens(self, tokens: list[int], salt: str | None = None) -> int:
        n = 0
        with self._lock:
            for h in self._hashes(tokens, salt):
                if h not in self._blocks:
                    break
                self._blocks.move_to_end(h)
                n += VLLM_BLOCK_SIZE
        # vLLM never reports the whole prompt as cached: the last token is always computed
        return min(n, ((len(tokens) - 1) // VLLM_BLOCK_SIZE) * VLLM_BLOCK_SIZE)

    def insert(self, tokens: list[int], salt: str | None = None) -> None:
        with self._lock:
            for h in self._hashes(tokens, salt):
                self._blocks[h] = None
                self._blocks.move_to_end(h)
            while self._blocks and len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)


class LocalCpuTier:
    """LMCache's LocalCPUBackend (local_cpu: true): keys held in RAM up to a byte budget, each
    with the digest of the bytes it holds (what a load from it hands the GPU)."""

    def __init__(self, capacity_bytes: int):
        self.capacity = capacity_bytes
        self.used = 0
        self._keys: OrderedDict[str, int] = OrderedDict()
        self._digests: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def digest(self, key: str) -> bytes | None:
        """The digest of the bytes held under ``key`` (None: not held)."""
        with self._lock:
            return self._digests.get(key)

    def contains(self, key: str) -> bool:
        with self._lock:
            if key in self._keys:
                self._keys.move_to_end(key)
                return True
            return False

    def put(self, key: str, size: int, digest: bytes | None = None) -> None:
        """Hold ``key`` (``digest``: of its bytes; None: the computed bytes)."""
        if size > self.capacity:
            return
        with self._lock:
            if key in self._keys:
                return
            self._keys[key] = size
            self._digests[key] = digest or answer.digest(answer.chunk_payload(key, size))
            self.used += size
            while self.used > self.capacity:
                old, s = self._keys.popitem(last=False)
                self._digests.pop(old, None)
                self.used -= s


class KVEngine:
    def __init__(
        self,
        *,
        hasher: ChunkHasher,
        tp: int,
        bytes_per_token: int,
        prefill_ms_per_token: float,
        store=None,  # S3Store | KvcephStore | None
        local_cpu: LocalCpuTier | None = None,
        load_failure_policy: str = "fail",
        kv_role: str = "kv_both",
        local_cache_tokens: int = 1 << 20,
        limits: LoadLimits | None = None,
    ):
        self.hasher = hasher
        self.tp = tp
        self.bytes_per_token = bytes_per_token
        self.prefill_ms_per_token = prefill_ms_per_token
        self.store = store
        self.local_cpu = local_cpu
        self.load_failure_policy = load_failure_policy
        self.kv_role = kv_role
        self.local = LocalPrefixCache(local_cache_tokens)
        self.limits = limits or LoadLimits()
        self.gpu = threading.Lock()  # one prefill at a time, like one busy accelerator
        self.dead: str | None = None  # why the engine core died, once it has
        # The KV of the chunks vLLM's prefix cache holds: key -> digest of the bytes it held
        # (computed or loaded), bounded like the prefix cache.
        self.held: OrderedDict[str, bytes] = OrderedDict()

    def chunk_bytes(self, ntokens: int) -> int:
        return self.bytes_per_token * ntokens

    @property
    def mp(self) -> bool:
        """LMCache MP mode: the host's server holds L1 and L2 (mp_client.py)."""
        return getattr(self.hasher, "mp", False)

    def keys_for(self, chunk_hash) -> list[str]:
        if self.mp:  # LMCache's MP key strings; the L2 plugin names the objects
            return [self.hasher.key_string(chunk_hash, w) for w in range(self.tp)]
        return [object_name(self.hasher.key_string(chunk_hash, w)) for w in range(self.tp)]

    # -- lookup / load ------------------------------------------------------------------------
    def _lookup(self, tokens: list[int]) -> tuple[list[tuple[int, int, int]], int]:
        """Chunks [(start, end, hash)] and how many of them, in prefix order, hit."""
        spans = self.hasher.chunks(tokens)
        hashes = self.hasher.chunk_hashes(tokens)
        chunks = [(s, e, h) for (s, e), h in zip(spans, hashes, strict=True)]
        if self.kv_role == "kv_producer":
            return chunks, 0
        hits = 0
        for i, (start, end, h) in enumerate(chunks):
            keys = self.keys_for(h)
            if self.local_cpu is not None and all(self.local_cpu.contains(k) for k in keys):
                hits += 1
                continue
            if self.store is None:
                break
            if hasattr(self.store, "prefix_hits"):
                # kvceph's connector: the remaining chunks' HEADs at once (LMCache asks the
                # remote tier for what the local tier did not have), the crossover applied.
                rest = chunks[i:]
                hits += self.store.prefix_hits(
                    [self.keys_for(c) for _, _, c in rest],
                    [self.chunk_bytes(e - s) for s, e, _ in rest],
                )
                break
            want = self.chunk_bytes(end - start)
            if all(self.store.head(k) == want for k in keys):
                hits += 1
                continue
            break
        return chunks, hits

    def _load(self, chunks: list[tuple[int, int, int]], got: dict[str, bytes]) -> int:
        """Fetch the chunks (all GETs in flight at once); how many leading chunks loaded.

        + got: filled with key -> digest of the bytes each loaded object held (DRAM or S3).
        """
        wanted: list[tuple[int, str, int]] = []  # (chunk index, key, size)
        for i, (start, end, h) in enumerate(chunks):
            for key in self.keys_for(h):
                held = self.local_cpu.digest(key) if self.local_cpu is not None else None
                if held is not None:
                    got[key] = held
                    continue
                wanted.append((i, key, self.chunk_bytes(end - start)))
        if wanted and self.store is None:
            return min(i for i, _, _ in wanted)
        datas = (
            self.store.get_many([k for _, k, _ in wanted], [n for _, _, n in wanted])
            if wanted
            else []
        )
        bad = len(chunks)
        for (i, key, _), data in zip(wanted, datas, strict=True):
            if data is None:
                bad = min(bad, i)
            else:
                # Not checked against what was computed: LMCache hands the GPU what S3 served.
                got[key] = answer.digest(data)
        return bad

    def _bytes(self, chunks: list) -> int:
        """KV bytes of ``chunks`` on one worker."""
        return sum(self.chunk_bytes(end - start) for start, end, _ in chunks)

    def _fetch(self, todo: list, cancelled: threading.Event, got: dict) -> int | None:
        """LMCache's retrieve: a buffer block per chunk, then the GETs; None if cancelled.
        ``got``: key -> digest of the bytes loaded (``_load``).

        Decided from the same quantities LMCache uses: the chunks' bytes per worker against
        the pinned buffer (a block that cannot be allocated is retried until cancelled), and
        the transfer itself (no faster than the simulated bandwidth).
        """
        need = self._bytes(todo)
        if need > self.limits.cpu_buffer_bytes:
            # The first block that does not fit: LMCache logs it on every retry.
            block = self.chunk_bytes(self.hasher.chunk_size)
            while not cancelled.is_set():
                lmcache_log.warning(
                    "Failed to allocate memory block of size %d because no memory is available",
                    block,
                )
                cancelled.wait(ALLOC_RETRY_SECONDS)
            return None
        t0 = time.monotonic()
        in_dram = [self._in_dram(c) for c in todo]
        dram = self._bytes([c for c, here in zip(todo, in_dram, strict=True) if here])
        ok = self._load(todo, got)
        if self.local_cpu is not None and not self.limits.async_loading:
            # LMCache 0.5.6's synchronous get writes what S3 served into the DRAM tier
            # (StorageManager.batched_get); its asynchronous prefetch does not (a TODO there).
            for (start, end, h), here in zip(todo[:ok], in_dram, strict=False):
                if not here:
                    for key in self.keys_for(h):
                        self.local_cpu.put(key, self.chunk_bytes(end - start), got.get(key))
        rate = self.limits.load_bytes_per_s
        if rate:
            took = transfer_seconds(need - dram, dram, self.tp, rate)
            cancelled.wait(max(0.0, took - (time.monotonic() - t0)))
        return None if cancelled.is_set() else ok

    def _in_dram(self, chunk) -> bool:
        """Every worker's object of ``chunk`` is in the DRAM tier (MP: the server's L1 had it
        before the lookup's prefetch from L2)."""
        if self.mp:
            return chunk[0] // self.hasher.chunk_size < getattr(self.store, "l1_hits", 0)
        tier = self.local_cpu
        return tier is not None and all(tier.contains(k) for k in self.keys_for(chunk[2]))

    def _bounded_load(
        self, req_id: str, todo: list, started: float, n: int, got: dict
    ) -> int | None:
        """Leading chunks of ``todo`` loaded; None when LMCache gave up (0 hits, recompute).
        ``got``: key -> digest of the bytes loaded (``_load``).

        Raises EngineDead where vLLM's engine died: synchronous loading whose buffer never had
        room (H200 recipe: 'Retrieved 0 ...' after blocking_timeout_secs, then EngineDeadError).
        """
        lim = self.limits
        cancelled = threading.Event()
        box: list = []
        worker = threading.Thread(
            target=lambda: box.append(self._fetch(todo, cancelled, got)), daemon=True
        )
        worker.start()
        if lim.async_loading:
            # The async lookup prefetches every chunk before it answers the scheduler.
            worker.join(max(0.0, started + lim.lookup_timeout_ms / 1000 - time.monotonic()))
            if worker.is_alive():
                cancelled.set()
                lmcache_log.warning(
                    "Request %s is still waiting for async lookup after %d seconds, returning 0 "
                    "lmcache cached tokens so vllm can recompute",
                    req_id,
                    lim.lookup_timeout_ms // 1000,
                )
                return None
        else:
            t0 = time.monotonic()
            worker.join(lim.blocking_timeout_secs)
            if worker.is_alive():
                cancelled.set()
                worker.join()
                need = todo[-1][1] - todo[0][0]
                starved = self._bytes(todo) > lim.cpu_buffer_bytes
                if not starved:
                    lmcache_log.warning(
                        "batched get blocking timeout, trigger cancel the future task"
                    )
                lmcache_log.info(
                    "[req_id=%s] Retrieved 0 out of %d required tokens (from %d total tokens). "
                    "size: 0.0000 gb, cost %.4f ms, throughput: 0.0000 GB/s;",
                    req_id,
                    need,
                    n,
                    (time.monotonic() - t0) * 1000,
                )
                if starved:
                    raise EngineDead(
                        f"request {req_id}: retrieve found no memory in LMCache's CPU buffer "
                        "within blocking_timeout_secs"
                    )
                return 0
        got = box[0] if box else None
        if got:
            size = self._bytes(todo[:got]) * self.tp
            took = max(time.monotonic() - started, 1e-9)
            lmcache_log.info(
                "[req_id=%s] Retrieved %d out of %d required tokens (from %d total tokens). "
                "size: %.4f gb, cost %.4f ms, throughput: %.4f GB/s;",
                req_id,
                todo[got - 1][1] - todo[0][0],
                todo[-1][1] - todo[0][0],
                n,
                size / (1 << 30),
                took * 1000,
                size / (1 << 30) / took,
            )
        return got or 0

    def prefill(
        self, req_id: str, tokens: list[int], salt: str | None = None
    ) -> tuple[PrefillResult, list]:
        """Lookup, load and simulated prefill. Returns the result and the chunks to store.

        + salt: the request's cache_salt (vLLM's prefix cache only; LMCache ignores it)
        """
        n = len(tokens)
        with self.gpu:
            if self.dead:
                raise EngineDead(self.dead)
            t0 = time.monotonic()
            local_hit = self.local.hit_tokens(tokens, salt)
            chunks, hits = self._lookup(tokens)
            external_hit = chunks[hits - 1][1] if hits else 0
            # LMCacheConnectorV1.get_num_new_matched_tokens: full-prompt hit -> recompute the
            # last token; only tokens beyond the local prefix hit are loaded.
            usable = external_hit - 1 if external_hit == n and n > 0 else external_hit
            loaded_to = local_hit
            dram_to = local_hit  # DRAM chunks lead: LMCache asks S3 only after the DRAM tier
            remote_bytes = 0
            digests: dict[str, bytes] = {}  # key -> digest of the bytes loaded
            loaded_chunks: list = []
            if usable > local_hit:
                todo = [c for c in chunks[:hits] if c[1] > local_hit]
                in_dram = [self._in_dram(c) for c in todo]
                for c, here in zip(todo, in_dram, strict=True):
                    if not here:
                        break
                    dram_to = c[1]
                try:
                    ok = self._bounded_load(req_id, todo, t0, n, digests)
                except EngineDead as exc:
                    self.dead = str(exc)
                    raise
                if ok is None:  # the async lookup gave up: LMCache answered 0 hits
                    external_hit = usable = ok = 0
                    todo = []
                if ok < len(todo):
                    start, end, _ = todo[ok]
                    if self.load_failure_policy != "recompute":
                        raise LoadFailed(
                            f"request {req_id}: KV load failed for tokens {start}-{end}"
                        )
                    log.warning(
                        "lmcache: request=%s load failed at tokens %d-%d; recomputing",
                        req_id,
                        start,
                        end,
                    )
                if ok:
                    loaded_chunks = todo[:ok]
                    loaded_to = min(todo[ok - 1][1], usable)
                    got = [c for c, here in zip(todo[:ok], in_dram, strict=False) if not here]
                    remote_bytes = self._bytes(got) * self.tp
            load_seconds = time.monotonic() - t0
            loaded = max(0, loaded_to - local_hit)
            dram_loaded = max(0, min(dram_to, loaded_to) - local_hit)
            computed = n - local_hit - loaded
            prefill_seconds = computed * self.prefill_ms_per_token / 1000.0
            if prefill_seconds > 0:
                time.sleep(prefill_seconds)
            self.local.insert(tokens, salt)
            kv = self._held_kv(chunks, local_hit, loaded_chunks, digests)
        # LMCache skips saving the chunks its lookup already found
        to_store = [] if self.kv_role == "kv_consumer" else chunks[hits:]
        return (
            PrefillResult(
                prompt_tokens=n,
                local_hit=local_hit,
                external_hit=external_hit,
                claimed=max(0, usable - local_hit),
                loaded=loaded,
                computed=computed,
                load_seconds=load_seconds,
                prefill_seconds=prefill_seconds,
                keys_hit=hits,
                dram_loaded=dram_loaded,
                remote_read_bytes=remote_bytes,
                kv=kv,
            ),
            to_store,
        )

    def _held_kv(
        self, chunks: list, local_hit: int, loaded: list, digests: dict[str, bytes]
    ) -> tuple[bytes, ...]:
        """The digests of the KV the request attends to, per chunk and worker in prefix order:
        loaded chunks hold what the tier served, chunks inside vLLM's prefix-cache hit what an
        earlier request held, the others what this prefill computed. vLLM's prefix cache keeps
        them for the next request.

        + chunks: the request's chunks. + local_hit: prefix-cache hit tokens.
        + loaded: the chunks loaded. + digests: key -> digest of the bytes loaded.
        """
        from_tier = {h for _, _, h in loaded}
        out = []
        for start, end, h in chunks:
            size = self.chunk_bytes(end - start)
            for key in self.keys_for(h):
                d = digests.get(key) if h in from_tier else None
                if d is None and end <= local_hit:
                    d = self.held.get(key)
                if d is None:
                    d = answer.digest(answer.chunk_payload(key, size))
                out.append(d)
                self.held[key] = d
                self.held.move_to_end(key)
        limit = self.tp * (self.local.capacity_blocks * VLLM_BLOCK_SIZE // self.hasher.chunk_size)
        while len(self.held) > limit:
            self.held.popitem(last=False)
        return tuple(out)

    # -- store --------------------------------------------------------------------------------
    def save(self, req_id: str, chunks: list, metrics=None) -> int:
        """PUT the given chunks for every worker (all in flight); returns chunks stored.
        + metrics: a ``Metrics`` that counts the store (LMCache's stored / remote write
        counters), None: not counted."""
        items: list[tuple[int, str, int]] = []
        ok = [True] * len(chunks)
        for i, (start, end, h) in enumerate(chunks):
            size = self.chunk_bytes(end - start)
            for key in self.keys_for(h):
                if self.local_cpu is not None:
                    self.local_cpu.put(key, size)
                if self.store is None:
                    continue
                if end - start != self.hasher.chunk_size:
                    log.error(
                        "Cannot upload %s: chunk size %s bytes does not match S3 part size "
                        "%s bytes. Partial/unfull chunks are not supported.",
                        key,
                        size,
                        self.chunk_bytes(self.hasher.chunk_size),
                    )
                    ok[i] = False
                    continue
                items.append((i, key, size))
        puts = put_bytes = 0  # S3 PUTs that succeeded
        if self.store is not None and items:
            results = self.store.put_many([(k, object_payload(k, n)) for _, k, n in items])
            for (i, _, _), good in zip(items, results, strict=True):
                ok[i] = ok[i] and good
            puts = sum(bool(good) for good in results)
            put_bytes = sum(n for (_, _, n), good in zip(items, results, strict=True) if good)
        if metrics is not None and (self.store is not None or self.local_cpu is not None):
            tokens = sum(end - start for start, end, _ in chunks)
            metrics.record_store(tokens=tokens, remote_puts=puts, remote_bytes=put_bytes)
        if self.store is None and self.local_cpu is None:
            return 0
        return sum(ok)
