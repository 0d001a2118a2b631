"""kvceph's S3 core as the L2 of LMCache's multi-process (MP) server: a ``native_plugin``.

``lmcache server`` loads it from its ``--l2-adapter`` JSON and wraps it in LMCache's
``NativeConnectorL2Adapter`` (lmcache/v1/distributed/l2_adapters/native_plugin_l2_adapter.py,
the same contract in 0.5.6 and 0.5.7rc2)::

    {"type": "native_plugin", "shared": true,
     "module_path": "kvceph_connector.lmcache_mp", "class_name": "KvcephMPConnector",
     "adapter_params": {"endpoint": "lmcache.s3.kvlab:443", "tls": true, "namespace": "kv/.../"}}

LMCache calls ``KvcephMPConnector(**adapter_params)``, then only the six methods below; it polls
``event_fd()`` from its demux thread and reads ``drain_completions()`` when it is readable.
No LMCache import is needed (route "native_plugin", not "plugin").

What each call does here:
- ``submit_batch_exists(keys)``: every HEAD at once (the core's ``lookup_future``); a key is
  there when its HEAD answered 200 (with ``object_bytes`` also of that size). No cache of hits
  or misses: a chunk another host writes is found by the next lookup, a deleted one is gone.
- ``submit_batch_get(keys, views)``: every GET at once, the body streamed straight into LMCache's
  L1 buffer and reported loaded only when exactly ``len(view)`` bytes arrived and (with
  ``verify_crc32c``, the default here) the crc32c stored at PUT matched. Per-key results.
- ``submit_batch_set(keys, views)``: one PutObject per key carrying crc32c and size metadata.
  LMCache reads one ``ok`` per batch: True only when every put succeeded.
- ``submit_batch_delete(keys)``: DeleteObject (LMCache's L2 eviction; a missing object counts
  as deleted).
- Every fault (S3 down, 403, 5xx, timeout, short or corrupt body) is a miss or a failed put:
  never an exception into LMCache's threads. After connection faults the core fails fast for
  a back-off (0.5 s doubling to 8 s) and then tries S3 again by itself: no breaker stays open.

Object names: LMCache hands over ``<model>@<kv_rank 08x>@<group x>@<chunk hash hex>[@salt]``
(``_object_key_to_string``); the object is ``prefix + that``, then the core's
:func:`~kvceph_connector.s3core.object_path` (``/`` -> ``_``, URL-quoted, at the bucket root,
or under ``/<bucket>`` path-style). ``namespace`` is kvceph's folder ``kv/<fields>/``
(deploys/settings/namespace.py: everything that changes the KV bytes under one LMCache key, as
in-process, plus the MP mode) before it; ``prefix`` (no '/') is a plain string before the key.

Credentials are never adapter parameters (LMCache logs them and they land in the server's
argv): the core's default chain reads AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE
with ~/.aws/credentials from the server's environment, as the engine does in-process.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import threading
from collections import deque
from typing import NamedTuple

from kvceph_connector.s3core import S3Config, S3Core
from kvceph_connector.settings import boolean, number

log = logging.getLogger("kvceph_connector.lmcache_mp")

#: The adapter_params keys and their defaults.
PARAMS = {
    "endpoint": None,
    "bucket": None,
    "addressing": "virtual",
    "region": "us-east-1",
    "tls": True,
    "ca_file": None,
    "connections": 16,
    "timeout_s": 5.0,
    "refresh_s": 60.0,
    "receive_dir": None,
    "verify_crc32c": True,
    "prefix": "",
    "namespace": "",
    "object_bytes": 0,
}
# Words of a parameter name (split at "_") that make it a credential: refused by name, with
# where it belongs instead.
_SECRET_WORDS = {"key", "secret", "token", "password", "credential", "credentials"}
# A prefix is part of every object name: characters that need no quoting and no "/" (the core
# turns "/" into "_", so a "directory" prefix would silently become another name).
_PREFIX = re.compile(r"[A-Za-z0-9._=+-]*@?")


class MPSettings(NamedTuple):
    s3: S3Config
    prefix: str  # prepended to LMCache's key string
    object_bytes: int  # > 0: a HEAD of another size is a miss (single-group models)


def _bool(name: str, value) -> bool:
    return boolean(f"kvceph MP adapter_params.{name}", value)


def _number(name: str, value, kind, minimum):
    return number(f"kvceph MP adapter_params.{name}", value, kind, minimum)


def mp_settings(params: dict) -> MPSettings:
    """The core's S3Config, the name prefix and object_bytes from LMCache's adapter_params.

    + params: the ``adapter_params`` object of the --l2-adapter JSON (see PARAMS).
    """
    secret = sorted(k for k in params if _SECRET_WORDS & set(k.lower().split("_")))
    if secret:
        raise ValueError(
            f"kvceph MP adapter_params.{secret[0]}: credentials never go into adapter_params "
            "(LMCache logs them, and the JSON is the server's argv); set AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY or AWS_PROFILE in the server's environment instead"
        )
    unknown = sorted(k for k in params if k not in PARAMS)
    if unknown:
        raise ValueError(
            f"unknown kvceph MP adapter_params key {unknown[0]!r}: it reads {', '.join(PARAMS)}"
        )
    got = {k: params.get(k, d) for k, d in PARAMS.items()}
    if not got["endpoint"]:
        raise ValueError(
            "kvceph MP adapter_params.endpoint is required: '<bucket>.<rgw_dns_name>[:port]' "
            "(addressing 'virtual') or '<rgw host>[:port]' with bucket (addressing 'path')"
        )
    endpoint, bucket, addressing = str(got["endpoint"]), got["bucket"], str(got["addressing"])
    if addressing not in ("virtual", "path"):
        raise ValueError(
            f"kvceph MP adapter_params.addressing must be 'virtual' or 'path', not {addressing!r}"
        )
    if addressing == "path" and not bucket:
        raise ValueError("kvceph MP adapter_params.addressing 'path' needs bucket")
    if addressing == "virtual" and bucket and endpoint.split(".", 1)[0] != bucket:
        raise ValueError(
            f"kvceph MP adapter_params.bucket {bucket!r} is not the first label of endpoint "
            f"{endpoint!r} (virtual-hosted addressing); use addressing 'path' or fix the endpoint"
        )
    prefix = str(got["prefix"])
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"kvceph MP adapter_params.prefix {prefix!r} may hold only A-Z a-z 0-9 . _ = + - "
            "and end in one '@'"
        )
    ca_file = str(got["ca_file"]) if got["ca_file"] else None
    if ca_file and not os.path.isfile(ca_file):
        raise ValueError(f"kvceph MP adapter_params.ca_file {ca_file!r} is not a file")
    config = S3Config(
        endpoint=endpoint,
        region=str(got["region"]),
        tls=_bool("tls", got["tls"]),
        connections=_number("connections", got["connections"], int, 1),
        timeout_s=_number("timeout_s", got["timeout_s"], float, 0.1),
        ca_file=ca_file,
        receive_dir=str(got["receive_dir"]) if got["receive_dir"] else None,
        refresh_s=_number("refresh_s", got["refresh_s"], float, 0),
        verify_crc32c=_bool("verify_crc32c", got["verify_crc32c"]),
        path_bucket=str(bucket) if addressing == "path" else None,
        # kvceph's "kv/<fields>/" folder (deploys/settings/namespace.py), as in-process;
        # S3Config refuses one that is no folder.
        namespace=str(got["namespace"] or ""),
    )
    return MPSettings(config, prefix, _number("object_bytes", got["object_bytes"], int, 0))


class KvcephMPConnector:
    """The native connector LMCache's NativeConnectorL2Adapter wraps (one per server process).

    + params: LMCache's adapter_params, as keyword arguments (see PARAMS and mp_settings).
    """

    def __init__(self, **params):
        _use_lmcache_logging()
        self.settings = mp_settings(params)
        self._prefix = self.settings.prefix
        self._core = S3Core(self.settings.s3)
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._done: deque[tuple[int, bool, str, list[bool] | None]] = deque()
        self._ids = itertools.count(1)
        self._closed = False
        self._lock = threading.Lock()  # completions come on several CRT threads at once
        #: what was asked and what came of it (keys), for status and the verifier
        self.counters = dict.fromkeys(
            ("lookups", "hits", "loads", "loaded", "stores", "stored", "deletes"), 0
        )
        log.info(
            "kvceph MP L2: %s addressing, prefix %r, crc32c check %s",
            "path-style" if self.settings.s3.path_bucket else "virtual-hosted",
            self._prefix,
            "on" if self.settings.s3.verify_crc32c else "off",
        )

    # -- LMCache's native connector contract -------------------------------------------
    def event_fd(self) -> int:
        """The eventfd that is readable while completions wait in drain_completions()."""
        return self._fd

    def submit_batch_exists(self, keys: list[str]) -> int:
        """HEAD every key at once; the completion's bools say which are there.

        + keys: LMCache's key strings.
        """
        future = self._core.lookup_future(self._names(keys), self.settings.object_bytes)
        return self._track(future, "lookups", "hits", lambda r: [s is not None for s in r], False)

    def submit_batch_get(self, keys: list[str], memoryviews: list) -> int:
        """GET each key into its view; a key is loaded only if all its bytes arrived, checked.

        + keys: LMCache's key strings. + memoryviews: the L1 buffers, one per key (writable).
        """
        _same_length(keys, memoryviews)
        names = self._names(keys)
        items = [(n, mv, memoryview(mv).nbytes) for n, mv in zip(names, memoryviews, strict=True)]
        return self._track(self._core.get_many_into_future(items), "loads", "loaded", list, True)

    def submit_batch_set(self, keys: list[str], memoryviews: list) -> int:
        """PUT each view under its key (crc32c and size metadata); ok when all were stored.

        + keys: LMCache's key strings. + memoryviews: the L1 buffers to write, one per key.
        """
        _same_length(keys, memoryviews)
        future = self._core.put_many_future(list(zip(self._names(keys), memoryviews, strict=True)))
        return self._track(future, "stores", "stored", list, True)

    def submit_batch_delete(self, keys: list[str]) -> int:
        """DELETE each key (LMCache's L2 eviction); a missing object counts as deleted.

        + keys: LMCache's key strings.
        """
        future = self._core.delete_future(self._names(keys))
        return self._track(future, "deletes", None, list, True)

    def drain_completions(self) -> list[tuple[int, bool, str, list[bool] | None]]:
        """Every completion since the last call: (future id, ok, error text, per-key bools)."""
        if not self._closed:  # a closed fd's number may belong to another file by now
            try:
                os.eventfd_read(self._fd)
            except (BlockingIOError, OSError):
                pass  # nothing signalled: the deque says what there is
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def close(self) -> None:
        """Close the core (queued requests complete as misses) and the eventfd."""
        self._core.close()
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)

    # -- internals -----------------------------------------------------------------------
    def _names(self, keys: list[str]) -> list[str]:
        return [self._prefix + str(k) for k in keys]

    def _track(self, future, asked: str, good: str | None, bools, all_or_nothing: bool) -> int:
        """A future id for LMCache; the batch's completion is posted when the core's is done.

        + future: the core's Future of its result list. + asked / good: counter names.
        + bools: result list -> per-key bools. + all_or_nothing: ok only if every key was.
        """
        fid = next(self._ids)

        def done(f):
            try:
                per_key = [bool(b) for b in bools(f.result())]
            except Exception as exc:  # the core never raises; a slip still completes the batch
                log.error("kvceph MP L2 %s: internal error: %s", asked, exc)
                per_key = [False] * len(getattr(f, "kvceph_ops", ()))
            hit = sum(per_key)
            with self._lock:
                self.counters[asked] += len(per_key)
                if good is not None:
                    self.counters[good] += hit
            failed = len(per_key) - hit
            ok = failed == 0 if all_or_nothing else True
            error = "" if ok else f"{failed} of {len(per_key)} {asked} failed (kvceph S3 log)"
            self._post((fid, ok, error, per_key))

        future.add_done_callback(done)
        return fid

    def _post(self, completion) -> None:
        self._done.append(completion)
        with self._lock:  # no write into a closed (or reused) fd number
            if not self._closed:
                os.eventfd_write(self._fd, 1)


def _same_length(keys: list, views: list) -> None:
    if len(keys) != len(views):
        raise ValueError(f"{len(keys)} keys but {len(views)} memoryviews")


def _use_lmcache_logging() -> None:
    """The core's lines in LMCache's log format, when LMCache is there (the server)."""
    try:
        from lmcache.logging import init_logger
    except ImportError:
        return
    init_logger("kvceph_connector")
