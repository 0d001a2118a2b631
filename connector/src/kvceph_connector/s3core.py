"""kvceph's S3 client core: concurrent HEAD / GET / PUT / DELETE of LMCache chunk objects.

Blocking API for callers, concurrent inside (awscrt's S3 client, as LMCache's stock connector):
- ``lookup(keys)`` sends every HEAD at once (up to ``connections`` in flight) and returns each
  object's size, or None for a miss. Nothing is cached: a chunk another host writes after a miss
  is found by the next lookup, and a deleted chunk stops counting. ``lookup(keys, size)`` applies
  the GET's rule on headers (:func:`refusal`) to what HEAD returns: no hit the GET then refuses.
- ``get_into(key, buffer, size)`` / ``get_many_into`` stream the body straight into the caller's
  memory (``on_body`` + ``ctypes.memmove``, the shape measured fastest into pinned memory) and
  hand it over only after every byte of the expected size arrived (so no buffer is handed over
  that was not written whole) and the crc32c in ``x-amz-meta-kvceph-crc32c`` matched
  (``verify_crc32c``, on by default; an object without that header, written by LMCache's stock
  connector, is accepted on size). The checksum runs on the core's own check threads, never on
  awscrt's event-loop threads, and without the GIL (awscrt's crc32c releases it).
- ``put(key, data)`` is one PutObject carrying the checksum and size as metadata: RGW shows the
  object only once the whole body arrived, so a broken upload never becomes a hit.
- Every fault (403, 404, 5xx, timeout, truncated body, wrong size, bad checksum, connection
  refused) is a miss or a failed put with one log line per batch and kind, never an exception.
  After connection-level faults (no HTTP answer, or 5xx) requests fail fast for a short back-off
  (0.5 s, doubling to 8 s), then go out again by themselves: no breaker stays open.
- Nothing outlives its use: a finished request lets go of awscrt's request object (whose native
  callbacks point back at it, a cycle Python's collector cannot see), and a client replaced by
  the refresh goes, event loops and resolver with it, once its last request ended.

The ``*_future`` forms return a concurrent.futures.Future of the same result, for asyncio callers
(``asyncio.wrap_future``); they never raise either.
"""

from __future__ import annotations

import ctypes
import inspect
import itertools
import logging
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import quote

log = logging.getLogger("kvceph_connector.s3core")

#: Metadata headers kvceph writes with every object (RGW returns them on HEAD and GET).
CRC_HEADER = "x-amz-meta-kvceph-crc32c"
SIZE_HEADER = "x-amz-meta-kvceph-size"
# Back-off after connection-level faults: short, so the tier is back within seconds of RGW.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 8.0
# CRT splits GETs into ranged parts of this size on parallel connections (its own default).
PART_SIZE = 8 << 20
# Larger than any chunk: a put is always one PutObject, never a multipart upload.
SINGLE_PUT_LIMIT = 5 << 30
# Priority of each request kind in the dispatch queue: lookups first, puts last (as LMCache's
# stock connector orders PEEK < GET < PUT), so writes never delay a request's reads.
# Words in awscrt's error names that mean "no usable connection" (refused, reset, DNS, TLS).
_NETWORK_WORDS = ("CONNECTION", "SOCKET", "DNS", "TLS", "HOST", "NETWORK", "BROKEN_PIPE")
# awscrt errors that stand for a 5xx answer whose status it does not pass on.
_SERVER_WORDS = ("S3_INTERNAL_ERROR", "S3_SLOW_DOWN", "SERVICE_UNAVAILABLE")
_PRIORITY = {"HEAD": 0, "DELETE": 0, "GET": 1, "PUT": 2}
# Threads of the crc32c check of GET bodies (verify_crc32c). awscrt's crc32c runs 13-18 GiB/s
# on one core and releases the GIL, so two keep up with any link; on awscrt's event-loop
# threads the check delayed every other request's callbacks (the H200's warm-time loss, loan 10).
CHECK_THREADS = 2
#: At most one line with the running count of refused bodies this often (seconds), per core.
REPORT_EVERY_S = 60.0
#: The start of that line (deploys/facts/connector.py reads it from the engine's journal).
REFUSED_LINE = "kvceph: crc32c since start: refused"


@dataclass(frozen=True)
class S3Config:
    """Where and how the core talks to S3.

    + endpoint: "<bucket>.<rgw_dns_name>[:port]", sent as the Host header (virtual-hosted
      addressing, like LMCache's stock connector); the client connects to that name.
    + region: the signing region (RGW accepts any, "us-east-1" by convention).
    + tls: https (True) or plain http.
    + connections: requests in flight at once, and the CRT client's connection limit.
    + timeout_s: a request is cancelled (a miss) when no request of the core made progress
      for this long, or it alone made none for 3 x this while others did; also the connect
      timeout. Queued requests do not count: only in-flight ones.
    + access_key_id / secret_access_key: static keys; both unset = awscrt's default chain
      (AWS_ACCESS_KEY_ID..., AWS_PROFILE + ~/.aws/credentials).
    + ca_file: a PEM bundle to trust instead of the system's (tests, the lab CA).
    + namespace: put before every object name ("kv/<fields>/", deploys/settings/namespace.py:
      one namespace per KV byte layout); "" = LMCache's names at the bucket root.
    + refresh_s: the CRT client and its resolver are built anew this often (0: never), so an
      address of the endpoint that failed and came back is used again (see _refresh_client).
    + receive_dir: None = a GET's body comes through awscrt's on_body callback (CRT hands
      Python a bytes copy of every part, with the GIL: one thread's worth of copying for all
      connections); a directory (a tmpfs: /dev/shm) = CRT writes the body to a file there on
      its own threads and the core reads it into the buffer when it is done (os.preadv, no
      GIL), then deletes it. Needs room there for `connections` objects at once.
    + path_bucket: None = virtual-hosted addressing (the bucket is the endpoint's first label);
      a bucket name = path-style: the endpoint is the RGW host itself and every request's path
      starts with ``/<path_bucket>`` (no wildcard DNS or per-bucket /etc/hosts name needed).
    + verify_crc32c: check each GET's body against the crc32c its PUT stored (puts always store
      it); a body that fails is a miss, counted (``crc32c_refused``). On by default: the check
      runs on the core's own threads without the GIL (bench/crc_cost.py). Run on awscrt's
      event-loop threads, as before, it cost the H200 32k warm 2.74 -> 3.47 s
      (hw/h200/results/2026-12-04-loan10). The size check stays on either way.

    repr() and str() leave the secret key out.
    """

    endpoint: str
    region: str = "us-east-1"
    tls: bool = True
    connections: int = 16
    timeout_s: float = 5.0
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    namespace: str = ""
    receive_dir: str | None = None
    refresh_s: float = 60.0
    verify_crc32c: bool = True
    path_bucket: str | None = None

    def __post_init__(self):
        if not self.endpoint or "/" in self.endpoint or "://" in self.endpoint:
            raise ValueError(
                f"S3 endpoint {self.endpoint!r} must be '<bucket>.<dns_name>[:port]' "
                "(no scheme, no path)"
            )
        if int(self.connections) < 1:
            raise ValueError(f"S3 connections must be >= 1, not {self.connections}")
        if not float(self.timeout_s) > 0:
            raise ValueError(f"S3 timeout_s must be > 0, not {self.timeout_s}")
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ValueError("S3 static keys need both access_key_id and secret_access_key")
        if self.namespace and (self.namespace.startswith("/") or not self.namespace.endswith("/")):
            raise ValueError(
                f"S3 namespace {self.namespace!r} must be '<folder>/', not start with /"
            )
        if self.receive_dir is not None and not os.path.isdir(self.receive_dir):
            raise ValueError(f"S3 receive_dir {self.receive_dir!r} is not a directory")
        if self.path_bucket is not None and (not self.path_bucket or "/" in self.path_bucket):
            raise ValueError(f"S3 path_bucket {self.path_bucket!r} must be a bucket name")

    @property
    def bucket(self) -> str:
        """The bucket: path_bucket, else the endpoint's first DNS label."""
        if self.path_bucket:
            return self.path_bucket
        return self.endpoint.split(":", 1)[0].split(".", 1)[0]


def object_path(key: str, namespace: str = "") -> str:
    """The HTTP path of a chunk object: LMCache 0.5.6's S3Connector's, under ``namespace``.

    Slashes of the key (the model path is part of it) become underscores, the rest is
    URL-quoted; the object sits in the namespace's folder (the bucket root for "").
    + key: CacheEngineKey.to_string(), e.g. "model@1@0@abc123@bfloat16".
    + namespace: S3Config.namespace ("kv/<fields>/" or "").
    """
    return "/" + quote(namespace + key.replace("/", "_"))


def crc32c(data) -> int:
    """crc32c of a bytes-like object (awscrt's hardware-accelerated implementation)."""
    from awscrt import checksums

    return checksums.crc32c(data)


class _Body:
    """A request body over a bytes-like object that awscrt reads with readinto.

    The copy into CRT's buffer is one ``ctypes.memmove``, which runs without the GIL: a
    slice assignment holds it for the whole copy (~0.8 s per GiB into CRT's fresh buffers),
    and in the engine that stalled the prefill loop while the previous step's chunks went
    out (bench/put_gil.py measures it).
    + data: the bytes-like body. + progress: called on every read (the upload moves).
    """

    def __init__(self, data, progress=None):
        self.mv = memoryview(data).cast("B")
        self.pos = 0
        self.progress = progress
        self.addr, self._keep = _source_address(data, self.mv)

    def readinto(self, buf) -> int:
        n = min(len(buf), len(self.mv) - self.pos)
        if n > 0:
            dst = _writable_address(buf) if self.addr is not None else None
            if dst is None:
                buf[:n] = self.mv[self.pos : self.pos + n]
            else:
                ctypes.memmove(dst, self.addr + self.pos, n)
        self.pos += n
        if self.progress is not None:
            self.progress()
        return n

    def read(self, size: int = -1):
        end = len(self.mv) if size is None or size < 0 else min(len(self.mv), self.pos + size)
        out = self.mv[self.pos : end]
        self.pos = end
        if self.progress is not None:
            self.progress()
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: len(self.mv)}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos


def _source_address(data, view: memoryview) -> tuple[int | None, object]:
    """The address of a body's bytes, and what keeps it valid; (None, None) = copy by slice.

    + data: the caller's object. + view: its byte view (writable ones are exported once).
    """
    if not view.c_contiguous or len(view) == 0:
        return None, None
    if not view.readonly:
        return _address_of(view, len(view))
    if isinstance(data, bytes):
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value, data
    return None, None


def _writable_address(buf) -> int | None:
    """The address of CRT's writable read buffer, or None (then the copy is a slice)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(buf))
    except (TypeError, ValueError):
        return None


class _Op:
    """One request: its inputs, progress, outcome (result + fault) and the caller's future."""

    __slots__ = (
        "kind",
        "key",
        "addr",
        "size",
        "data",
        "keep",
        "future",
        "lock",
        "dead",
        "deadline",
        "req",
        "status",
        "headers",
        "received",
        "fault",
        "kind_of_fault",
        "connection_fault",
        "started",
        "backoff",
        "finished",
        "path",
        "crt_done",
        "__weakref__",  # tests check that a finished request is freed
    )

    def __init__(self, kind: str, key: str, addr: int = 0, size: int = 0, data=None, keep=None):
        self.kind, self.key, self.addr, self.size, self.data = kind, key, addr, size, data
        self.keep = keep  # keeps a caller's buffer object alive while CRT writes into it
        self.future: Future = Future()
        self.lock = threading.Lock()
        self.dead = False  # set once: no byte may be written into the buffer after this
        self.deadline = 0.0
        self.req = None
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.received = 0
        self.fault: str | None = None
        self.kind_of_fault: str | None = None
        self.connection_fault = False
        self.started = 0.0
        self.backoff = 0.0  # > 0: this request's fault began a back-off of that many seconds
        self.finished = False
        self.path: str | None = None  # receive_dir mode: the file CRT writes the body to
        self.crt_done = False  # CRT called on_done: its request object is let go


def _address_of(buffer, size: int) -> tuple[int, object]:
    """The address of a writable buffer of at least size bytes, and the object to keep alive.

    + buffer: an int address, or any writable bytes-like object (bytearray, memoryview, numpy).
    """
    if isinstance(buffer, int):
        return buffer, None
    view = memoryview(buffer).cast("B")
    if view.readonly or len(view) < size:
        raise ValueError(f"buffer must be writable and hold {size} bytes")
    arr = (ctypes.c_char * len(view)).from_buffer(view)
    return ctypes.addressof(arr), (view, arr)


class S3Core:
    """The S3 client: one awscrt S3Client, a priority dispatch queue and a progress watchdog.

    + config: an S3Config.
    """

    def __init__(self, config: S3Config):
        from awscrt import auth, io, s3

        self.config = config
        self._s3 = s3
        self._connections = int(config.connections)
        self._timeout = float(config.timeout_s)
        self._io = io
        if config.access_key_id:
            self._creds = auth.AwsCredentialsProvider.new_static(
                config.access_key_id, config.secret_access_key
            )
        else:
            # On an event loop of its own: the provider lives as long as the core, and on the
            # first client's it would keep that client's event loops when the refresh replaces it.
            elg = io.EventLoopGroup(1)
            own = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
            self._creds = auth.AwsCredentialsProvider.new_default_chain(own)
        tls_options = None
        if config.tls and config.ca_file:
            ctx_opts = io.TlsContextOptions()
            ctx_opts.override_default_trust_store_from_path(ca_filepath=config.ca_file)
            tls_options = io.TlsConnectionOptions(io.ClientTlsContext(ctx_opts))
        self._tls_options = tls_options
        self._client = self._new_client(self._bootstrap())
        self._client_born = time.monotonic()
        self._refresh_s = float(config.refresh_s)

        self._lock = threading.Lock()
        self._queues: list[deque[_Op]] = [deque(), deque(), deque()]
        self._in_flight: set[_Op] = set()
        self._closed = False
        self._backoff_until = 0.0
        self._backoff_s = 0.0
        self._backoff_since = 0.0
        self._last_progress = 0.0  # any request's last sign of life (monotonic)
        self._wake = threading.Event()
        # Replaced clients still finishing requests: their shutdown events (awscrt sets one
        # when the client's requests, event loops and resolver are gone).
        self._retired: list[threading.Event] = []
        # The crc32c check of GET bodies, off awscrt's event-loop threads (threads start lazily).
        self._checks = (
            None
            if not config.verify_crc32c
            else _Inline()
            if _green()
            else ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="kvceph-s3-crc32c")
        )
        self.crc32c_checked = 0  # GET bodies whose crc32c was checked since start
        self.crc32c_refused = 0  # ... and refused (each a miss)
        self._refused_reported = 0  # crc32c_refused as of the last line
        self._refused_last = ""  # the latest refusal: key and checksums
        self._next_report = 0.0
        self._watchdog = threading.Thread(
            target=self._watch, name="kvceph-s3-watchdog", daemon=True
        )
        self._watchdog.start()
        log.info(
            "kvceph S3 core: Host=%s bucket=%s %s, %d connections, timeout %.1f s, crc32c check %s",
            config.endpoint,
            config.bucket,
            "https" if config.tls else "http",
            self._connections,
            self._timeout,
            "on" if config.verify_crc32c else "off",
        )

    def _bootstrap(self):
        # One event-loop thread per connection, at most 64 (what the H200 runs measured: 16 by
        # default, 64 in loans 3 and 10).
        elg = self._io.EventLoopGroup(max(2, min(self._connections, 64)))
        return self._io.ClientBootstrap(elg, self._io.DefaultHostResolver(elg))

    def _new_client(self, bootstrap):
        """A CRT S3 client of this core's settings, on its own event loops and resolver."""
        s3, config = self._s3, self.config
        kwargs = dict(
            bootstrap=bootstrap,
            region=config.region,
            tls_mode=s3.S3RequestTlsMode.ENABLED if config.tls else s3.S3RequestTlsMode.DISABLED,
            credential_provider=self._creds,
            tls_connection_options=self._tls_options,
            part_size=PART_SIZE,
            multipart_upload_threshold=SINGLE_PUT_LIMIT,
            # CRT sizes its connection pool from the throughput target (~0.4 Gbit/s each).
            throughput_target_gbps=max(10.0, 0.4 * self._connections),
        )
        # Newer awscrt: an exact connection cap, one retry only (a fault is a miss, quickly),
        # and the connect timeout. Older releases lack them; their defaults are safe, slower.
        optional = dict(
            max_active_connections_override=self._connections,
            connect_timeout_ms=int(self._timeout * 1000),
        )
        if hasattr(s3, "S3RetryConfig"):
            optional["retry_config"] = s3.S3RetryConfig(
                max_retries=1, backoff_scale_factor_ms=50, max_backoff_secs=1
            )
        accepted = inspect.signature(s3.S3Client.__init__).parameters
        kwargs.update({k: v for k, v in optional.items() if k in accepted})
        return s3.S3Client(**kwargs)

    def _refresh_client(self) -> None:
        """A new client (and resolver) for the requests started from now on.

        awscrt's resolver keeps an address whose connect failed out of use while another
        address answers, for the life of the client: without this, an RGW that was down and
        came back would take no load until the engine restarts. Requests in flight finish on
        the old client (awscrt's native request holds it); once the last one has let go of its
        request object (_on_done), the client shuts down with its event loops and resolver.
        """
        client = self._new_client(self._bootstrap())
        with self._lock:
            if self._closed:
                return  # close() let go of the client: the new one goes unused
            old, self._client, self._client_born = self._client, client, time.monotonic()
            if old is not None:
                self._retired.append(old.shutdown_event)
        del old  # this core's last reference: nothing here keeps it, or its threads, alive

    def clients_alive(self) -> int:
        """Clients not yet shut down: the current one and replaced ones still finishing."""
        with self._lock:
            self._retired = [e for e in self._retired if not e.is_set()]
            return len(self._retired) + (self._client is not None)

    # -- public blocking API ---------------------------------------------------------------
    def lookup(self, keys: list[str], size: int = 0) -> list[int | None]:
        """Each object's size (bytes), or None for a miss; all HEADs concurrent.

        + keys: LMCache key strings.
        + size: the size a GET will expect (LMCache's full chunk size); given, an object the
          GET would refuse on its headers (:func:`refusal`) is a miss here already.
        """
        return self.lookup_future(keys, size).result()

    def get_into(self, key: str, buffer, size: int) -> bool:
        """Fetch one object into buffer; True only if exactly size bytes arrived and checked.

        + key: the key string. + buffer: an int address or writable bytes-like object.
        + size: the expected object size (LMCache's full chunk size).
        """
        return self.get_many_into([(key, buffer, size)])[0]

    def get_many_into(self, items: list[tuple[str, object, int]]) -> list[bool]:
        """The batched get_into: every GET in flight at once; one bool per item."""
        return self.get_many_into_future(items).result()

    def put(self, key: str, data) -> bool:
        """Write one object (one PutObject with crc32c and size metadata); True when stored.

        + key: the key string. + data: a bytes-like object (read, never copied whole).
        """
        return self.put_many([(key, data)])[0]

    def put_many(self, items: list[tuple[str, object]]) -> list[bool]:
        """Concurrent puts; one bool per item."""
        return self.put_many_future(items).result()

    def delete(self, keys: list[str]) -> list[bool]:
        """Delete objects (a missing one counts as deleted); one bool per key."""
        return self.delete_future(keys).result()

    def close(self) -> None:
        """Stop the watchdog; queued requests fail as misses. In-flight ones finish (checked),
        then the client goes with its event loops, resolver and check threads."""
        with self._lock:
            self._closed = True
            queued = [op for q in self._queues for op in q]
            for q in self._queues:
                q.clear()
            # awscrt's native requests hold the native client until they end: dropping the
            # Python side now is safe, and lets it shut down when they have.
            client, self._client, self._creds = self._client, None, None
            if client is not None:
                self._retired.append(client.shutdown_event)
        del client
        for op in queued:
            self._fail(op, "closed", "S3 core closed")
            self._complete(op)
        if self._checks is not None:
            self._checks.shutdown(wait=False)  # bodies already handed to it are still checked
        self._wake.set()

    # -- public future API (for asyncio callers) -------------------------------------------
    def lookup_future(self, keys: list[str], size: int = 0) -> Future:
        """lookup() as a Future of the list."""
        return self._batch([_Op("HEAD", k, size=size) for k in keys], "lookup")

    def get_many_into_future(self, items: list[tuple[str, object, int]]) -> Future:
        """get_many_into() as a Future of the list of bools."""
        ops = []
        for key, buffer, size in items:
            try:
                addr, keep = _address_of(buffer, int(size))
            except (TypeError, ValueError) as exc:
                op = _Op("GET", key, size=int(size))
                self._fail(op, "buffer", str(exc))
            else:
                op = _Op("GET", key, addr=addr, size=int(size), keep=keep)
            ops.append(op)
        return self._batch(ops, "get")

    def put_many_future(self, items: list[tuple[str, object]]) -> Future:
        """put_many() as a Future of the list of bools."""
        return self._batch([_Op("PUT", k, data=d) for k, d in items], "put")

    def delete_future(self, keys: list[str]) -> Future:
        """delete() as a Future of the list of bools."""
        return self._batch([_Op("DELETE", k) for k in keys], "delete")

    # -- batching and logging --------------------------------------------------------------
    def abandon(self, batch: Future) -> None:
        """The caller gives up on a batch (e.g. its asyncio task was cancelled): after this
        returns, no byte is written into its buffers any more and queued requests never start.

        + batch: a Future from one of the *_future methods.
        """
        for op in getattr(batch, "kvceph_ops", ()):
            if not op.future.done():
                self._fail(op, "cancelled", "abandoned by the caller")
                self._cancel(op)

    def _batch(self, ops: list[_Op], what: str) -> Future:
        out: Future = Future()
        out.kvceph_ops = ops
        if not ops:
            out.set_result([])
            return out
        remaining = [len(ops)]
        lock = threading.Lock()

        def one_done(_):
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                try:
                    self._log_batch(what, ops)
                    result = [op.future.result() for op in ops]
                except Exception as exc:  # never let a logging slip hang the caller
                    log.error("kvceph S3 %s: internal error: %s", what, exc)
                    result = [_miss(op) for op in ops]
                try:
                    out.set_result(result)
                except InvalidStateError:
                    pass  # the caller cancelled the batch (asyncio.wrap_future does on cancel)

        for op in ops:
            op.future.add_done_callback(one_done)
        for op in ops:
            if not op.future.done():
                self._submit(op)
        return out

    def _log_batch(self, what: str, ops: list[_Op]) -> None:
        """One line per kind of fault in a batch (a 404 lookup is a plain miss: debug)."""
        kinds: dict[str, list[_Op]] = {}
        for op in ops:
            if op.fault is not None:
                kinds.setdefault(op.kind_of_fault or "error", []).append(op)
        for kind, bad in kinds.items():
            level = logging.DEBUG if (kind in ("404", "backoff") and what == "lookup") else None
            if kind in ("backoff", "crc32c"):
                # The back-off was logged once when it began; refused bodies have their own
                # running count, at most once a minute (_report_refused).
                level = logging.DEBUG
            verdict = "misses" if what in ("lookup", "get") else "failed"
            backoff = max(op.backoff for op in bad)
            then = (
                f"; every S3 request is a miss for {backoff:.1f} s, then S3 is tried again"
                if backoff
                else ""
            )
            log.log(
                logging.WARNING if backoff else (level or logging.WARNING),
                "kvceph S3 %s at %s: %d of %d %s (%s), first %s: %s%s",
                what,
                self.config.endpoint,
                len(bad),
                len(ops),
                verdict,
                kind,
                bad[0].key,
                bad[0].fault,
                then,
            )

    # -- dispatch --------------------------------------------------------------------------
    def _submit(self, op: _Op) -> None:
        with self._lock:
            if self._closed:
                refuse = "S3 core closed"
            elif time.monotonic() < self._backoff_until:
                refuse = f"backing off for {self._backoff_until - time.monotonic():.1f} s more"
            else:
                refuse = None
                if len(self._in_flight) < self._connections:
                    self._in_flight.add(op)
                else:
                    self._queues[_PRIORITY[op.kind]].append(op)
                    return
        if refuse is not None:
            self._fail(op, "closed" if self._closed else "backoff", refuse)
            self._complete(op)
            return
        self._start(op)

    def _next(self) -> None:
        """Start queued requests while there is room (called when one finishes)."""
        while True:
            with self._lock:
                if len(self._in_flight) >= self._connections:
                    return
                op = next((q.popleft() for q in self._queues if q), None)
                if op is None:
                    return
                backoff = time.monotonic() < self._backoff_until
                if not backoff:
                    self._in_flight.add(op)
            if backoff:
                self._fail(op, "backoff", "backing off after connection errors")
                self._complete(op)
            else:
                self._start(op)

    def _start(self, op: _Op) -> None:
        from awscrt.http import HttpHeaders, HttpRequest

        if op.dead:  # abandoned while it waited in the queue
            self._finish(op)
            return
        s3 = self._s3
        headers = HttpHeaders()
        headers.add("Host", self.config.endpoint)
        body = None
        if op.kind == "PUT":
            try:
                body = _Body(op.data, progress=lambda: self._moved(op))
            except TypeError as exc:
                self._fail(op, "data", f"put data is not bytes-like: {exc}")
                self._finish(op)
                return
            n = len(body.mv)
            headers.add("Content-Length", str(n))
            headers.add("Content-Type", "application/octet-stream")
            headers.add(CRC_HEADER, str(crc32c(body.mv)))
            headers.add(SIZE_HEADER, str(n))
        path = object_path(op.key, self.config.namespace)
        if self.config.path_bucket:
            path = "/" + quote(self.config.path_bucket, safe="") + path
        request = HttpRequest(op.kind, path, headers, body_stream=body)
        rtype = {
            "GET": s3.S3RequestType.GET_OBJECT,
            "PUT": s3.S3RequestType.PUT_OBJECT,
        }.get(op.kind, s3.S3RequestType.DEFAULT)
        extra = {}
        on_body = (lambda **kw: self._on_body(op, **kw)) if op.kind == "GET" else None
        if op.kind == "GET" and self.config.receive_dir:
            op.path = os.path.join(
                self.config.receive_dir, f"kvceph-{os.getpid()}-{next(_SEQ)}.get"
            )
            extra["recv_filepath"] = op.path
            extra["on_progress"] = lambda n: self._progressed(op, n)
            on_body = None
        if rtype == s3.S3RequestType.DEFAULT:
            extra["operation_name"] = {"HEAD": "HeadObject", "DELETE": "DeleteObject"}[op.kind]
        op.started = time.monotonic()
        op.deadline = op.started + self._timeout
        try:
            req = s3.S3Request(
                client=self._client,
                type=rtype,
                request=request,
                credential_provider=self._creds,
                region=self.config.region,
                on_headers=lambda **kw: self._on_headers(op, **kw),
                on_body=on_body,
                on_done=lambda **kw: self._on_done(op, **kw),
                **extra,
            )
        except Exception as exc:
            self._fail(op, "client", f"request not sent: {exc}")
            self._finish(op)
            return
        with op.lock:
            if not op.crt_done:  # a request can end before S3Request() returns
                op.req = req
        del req
        self._wake.set()

    # -- CRT callbacks (CRT threads, with the GIL) -----------------------------------------
    def _moved(self, op: _Op) -> None:
        """op made progress (headers, body bytes, upload reads): so did the core."""
        now = time.monotonic()
        op.deadline = now + self._timeout
        self._last_progress = now

    def _on_headers(self, op: _Op, status_code=None, headers=None, **_):
        try:
            op.status = status_code
            op.headers.update({k.lower(): v for k, v in headers or ()})
            self._moved(op)
            if op.kind == "GET" and status_code in (200, 206):
                size = _object_size(op.headers)
                if size is not None and size != op.size:
                    self._fail(op, "size", f"object has {size} bytes, expected {op.size}")
                    self._cancel(op)
        except Exception as exc:
            self._fail(op, "client", f"bad response headers: {exc}")

    def _on_body(self, op: _Op, chunk=None, offset=0, **_):
        n = len(chunk)
        with op.lock:
            if op.dead:
                return
            if offset < 0 or offset + n > op.size:
                op.dead = True
                bad = True
            else:
                # The bytes go straight into the caller's memory: one copy, no Python buffer.
                ctypes.memmove(op.addr + offset, chunk, n)
                op.received += n
                bad = False
        if bad:
            self._fail(op, "size", f"body runs past {op.size} bytes (offset {offset} + {n})")
            self._cancel(op)
        self._moved(op)

    def _progressed(self, op: _Op, n: int) -> None:
        """receive_dir mode: CRT wrote n more body bytes to op's file."""
        with op.lock:
            op.received += int(n)
        self._moved(op)

    def _take_file(self, op: _Op) -> None:
        """receive_dir mode: read op's finished file into the caller's buffer (under op.lock).

        Fewer or more bytes than expected leave op.received saying so (the body check fails).
        """
        try:
            fd = os.open(op.path, os.O_RDONLY)
        except OSError as exc:
            self._fail(op, "file", f"body file {op.path}: {exc.strerror}")
            return
        try:
            size = os.fstat(fd).st_size
            op.received = size
            if size != op.size:
                return
            view = memoryview((ctypes.c_char * op.size).from_address(op.addr)).cast("B")
            got = 0
            while got < size:
                n = os.preadv(fd, [view[got:]], got)  # no GIL while the kernel copies
                if n <= 0:
                    break
                got += n
            op.received = got
        except OSError as exc:
            self._fail(op, "file", f"body file {op.path}: {exc.strerror}")
        finally:
            os.close(fd)

    def _on_done(self, op: _Op, error=None, status_code=None, **_):
        try:
            if status_code is not None:
                op.status = status_code
            if op.fault is None and (error is not None or not _ok_status(op)):
                self._fault_from(op, error)
        except Exception as exc:
            self._fail(op, "client", str(exc))
        finally:
            # The request object's native side holds these callbacks, and they hold op: op
            # must let go of it, or neither (nor the client behind it) is ever freed.
            with op.lock:
                op.crt_done, op.req = True, None
            self._finish(op)

    def _fault_from(self, op: _Op, error) -> None:
        status = op.status or None  # awscrt reports 0 when no response came
        text = str(error) if error is not None else "no response"
        if status is None and any(w in text for w in _SERVER_WORDS):
            status = 500
        if op.kind in ("HEAD", "GET") and status == 404:
            self._fail(op, "404", "not found (404)")
        elif op.kind == "DELETE" and status == 404:
            return  # already gone: what a delete wants
        elif status is not None and status >= 500:
            self._fail(op, f"{status}", f"server error {status}", connection=True)
        elif status is not None and status >= 300:
            self._fail(op, f"{status}", f"refused with status {status}")
        elif op.kind == "GET" and 0 < op.received < op.size:
            self._fail(
                op,
                "truncated",
                f"body ended after {op.received} of {op.size} bytes: {text}",
                connection=True,
            )
        else:
            # No HTTP answer: a network-level fault backs off, a protocol one does not.
            network = any(w in text.upper() for w in _NETWORK_WORDS)
            self._fail(op, "connection" if network else "error", text, connection=network)

    # -- completion ------------------------------------------------------------------------
    def _finish(self, op: _Op) -> None:
        """Validate a finished request, update the back-off, deliver, start the next one."""
        with op.lock:
            if op.finished:
                return  # the watchdog gave up on it earlier; CRT's late on_done changes nothing
            op.finished = True
            if op.path is not None and op.kind == "GET" and op.fault is None and not op.dead:
                self._take_file(op)
            op.dead = True  # from here on nothing writes into the caller's buffer
        if op.path is not None:
            try:
                os.unlink(op.path)
            except OSError:
                pass  # never created (no body), or CRT removed it after a failure
        check = False
        if op.kind == "GET" and op.fault is None:
            self._check_body(op)
            check = op.fault is None and self._checks is not None and CRC_HEADER in op.headers
        elif op.kind == "HEAD" and op.size and op.fault is None and _ok_status(op):
            # The GET's rule on what HEAD returned: a hit the GET would refuse is a miss now,
            # before the engine plans to load it.
            refused = refusal(op.headers, op.size)
            if refused:
                self._fail(op, *refused)
        if op.fault is None:
            self._last_progress = time.monotonic()
            self._reachable()
        elif op.connection_fault:
            self._unreachable(op)
        with self._lock:
            self._in_flight.discard(op)
        if check:
            # The connection is free already: the next request starts while this body is
            # checked (and delivered) on a check thread.
            try:
                self._checks.submit(self._check_then_complete, op)
            except RuntimeError:  # closed: the check threads are gone
                self._check_then_complete(op)
        else:
            self._complete(op)
        self._next()

    def _check_body(self, op: _Op) -> None:
        refused = refusal(op.headers, op.size)
        if refused:
            self._fail(op, *refused)
        elif op.received != op.size:
            self._fail(op, "truncated", f"body ended after {op.received} of {op.size} bytes")

    def _check_then_complete(self, op: _Op) -> None:
        """The crc32c check of a GET body that arrived whole, then its delivery (check thread).

        Under op.lock, so abandon() returns only once the buffer is no longer read either.
        """
        try:
            with op.lock:
                if op.fault is not None:
                    return  # abandoned meanwhile: a miss already, and the buffer is the caller's
                got = crc32c((ctypes.c_char * op.size).from_address(op.addr))
            stored = op.headers[CRC_HEADER].strip()
            if str(got) != stored:
                self._fail(op, "crc32c", f"crc32c {got} != stored {stored}")
            self._counted(op, refused=str(got) != stored)
        except Exception as exc:  # never leave the caller without an answer
            self._fail(op, "client", f"crc32c check failed: {exc}")
        finally:
            self._complete(op)

    def _counted(self, op: _Op, refused: bool) -> None:
        """Count a checked body; the running count of refusals is logged at most once a
        REPORT_EVERY_S (the first one at once, a later count by the watchdog within that)."""
        with self._lock:
            self.crc32c_checked += 1
            if refused:
                self.crc32c_refused += 1
                self._refused_last = f"{op.key}: {op.fault}"
        if refused:
            self._report_refused()

    def _report_refused(self) -> None:
        now = time.monotonic()
        with self._lock:
            refused, checked, last = self.crc32c_refused, self.crc32c_checked, self._refused_last
            if now < self._next_report or refused == self._refused_reported:
                return
            self._next_report = now + REPORT_EVERY_S
            self._refused_reported = refused
        log.warning(
            "%s %d GET bodies of %d checked at %s (each a miss: not handed over), last %s",
            REFUSED_LINE,
            refused,
            checked,
            self.config.endpoint,
            last,
        )

    def _complete(self, op: _Op) -> None:
        if not op.future.done():
            op.future.set_result(_miss(op) if op.fault is not None else _result(op))

    def _fail(self, op: _Op, kind: str, text: str, connection: bool = False) -> None:
        if op.fault is None:  # the first fault is the cause; later ones follow from it
            op.fault, op.kind_of_fault, op.connection_fault = text, kind, connection

    def _cancel(self, op: _Op) -> None:
        with op.lock:
            op.dead = True
        req = op.req
        if req is not None:
            try:
                req.cancel()
            except Exception:  # already finished: nothing to cancel
                pass

    # -- back-off --------------------------------------------------------------------------
    def _unreachable(self, op: _Op) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._backoff_until:
                return  # one of many requests that failed together: already backing off
            self._backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_FIRST_S, self._backoff_s * 2))
            self._backoff_until = now + self._backoff_s
            if not self._backoff_since:
                self._backoff_since = now
            op.backoff = self._backoff_s  # the batch's log line says so

    def _reachable(self) -> None:
        if not self._backoff_since:
            return
        with self._lock:
            since, self._backoff_since, self._backoff_s = self._backoff_since, 0.0, 0.0
        if since:
            log.warning(
                "kvceph S3 reachable again at %s after %.1f s",
                self.config.endpoint,
                time.monotonic() - since,
            )

    # -- watchdog --------------------------------------------------------------------------
    def _watch(self) -> None:
        """Cancel requests that stopped moving.

        awscrt hands a GET's body over a whole part (8 MiB) at a time, so on a saturated link a
        request can go seconds without a callback while data flows. A request is stalled when
        neither it nor any other request of this core moved for timeout_s (RGW or the network
        stopped), or when it alone has not moved for 3 x timeout_s while others did (one stuck
        object).
        """
        tick = min(0.25, self._timeout / 4)
        while not self._closed:
            self._wake.wait(tick)
            self._wake.clear()
            now = time.monotonic()
            if now >= self._next_report:
                self._report_refused()  # a count that changed since the last line
            if self._refresh_s > 0 and now - self._client_born >= self._refresh_s:
                try:
                    self._refresh_client()
                except Exception as exc:  # the old client goes on serving
                    log.warning("kvceph S3 client refresh failed: %s", exc)
                    self._client_born = now
            quiet = now > self._last_progress + self._timeout
            with self._lock:
                late = [
                    op
                    for op in self._in_flight
                    if op.req is not None
                    and now > op.deadline
                    and (
                        quiet
                        or op.kind_of_fault == "timeout"
                        or now > op.deadline + 2 * self._timeout
                    )
                ]
            for op in late:
                if op.fault is not None and op.kind_of_fault == "timeout":
                    # Cancelled a timeout ago and CRT still has not finished it: deliver the
                    # miss now (op.dead keeps CRT's late bytes out of the caller's buffer).
                    self._finish(op)
                    continue
                alone = "" if quiet else " while other requests moved"
                waited = now - (op.deadline - self._timeout)
                self._fail(op, "timeout", f"no progress for {waited:.1f} s{alone}")
                op.deadline = now + self._timeout
                self._cancel(op)


_SEQ = itertools.count()


class _Inline:
    """The check threads' stand-in where threads are greenlets: the check runs in place."""

    def submit(self, fn, *args):
        """Run fn(*args) now. + fn: the work. + args: its arguments."""
        fn(*args)

    def shutdown(self, wait: bool = True):
        """Nothing to stop. + wait: ignored."""


def _green() -> bool:
    """True where gevent patched threading (pyinfra's process: s3probe, tests): a thread is a
    greenlet there, which CRT's native threads cannot wake (the checks would hang)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("threading"))


def _ok_status(op: _Op) -> bool:
    ok = {"HEAD": (200,), "GET": (200, 206), "PUT": (200, 201), "DELETE": (200, 204)}
    return op.status in ok[op.kind]


def refusal(headers: dict[str, str], size: int) -> tuple[str, str] | None:
    """(kind, text) when an object's headers rule it out for a read of ``size`` bytes, else
    None: the one acceptance rule of GET (before its body is checked) and of a sized lookup.

    + headers: the response's headers, names lower-case
    + size: the size expected (LMCache's full chunk size)
    """
    got = _object_size(headers)
    if got is None:
        return "size", "response has no Content-Length"
    if got != size:
        return "size", f"object has {got} bytes, expected {size}"
    if SIZE_HEADER in headers and headers[SIZE_HEADER] != str(size):
        return "size", f"metadata says {headers[SIZE_HEADER]} bytes"
    crc = headers.get(CRC_HEADER)
    # The GET compares the decimal text, so only the canonical form of a 32-bit value can pass.
    if crc is not None and not (crc.strip().isdigit() and str(int(crc) % (1 << 32)) == crc.strip()):
        return "checksum", f"stored crc32c {crc!r} is not a crc32c"
    return None


def _object_size(headers: dict[str, str]) -> int | None:
    """The whole object's size: Content-Range's total on a ranged answer, else Content-Length."""
    rng = headers.get("content-range", "")
    if "/" in rng and rng.rsplit("/", 1)[1].strip().isdigit():
        return int(rng.rsplit("/", 1)[1])
    value = headers.get("content-length")
    return int(value) if value is not None and value.strip().isdigit() else None


def _result(op: _Op):
    if op.kind == "HEAD":
        size = _object_size(op.headers)
        if size is None or size <= 0:
            return None
        meta = op.headers.get(SIZE_HEADER)
        return None if meta is not None and meta != str(size) else size
    return True


def _miss(op: _Op):
    return None if op.kind == "HEAD" else False
