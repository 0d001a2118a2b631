"""Where a request's time goes inside the engine: LMCache's lookup, fetch and copy to the GPU.

Shipped with the H200 run only (``hw/h200/gpu.sh`` puts this directory on the engine's
``PYTHONPATH``; nothing of kvceph's product imports it). At interpreter start it registers an
import hook; when LMCache's modules load, it wraps the methods below so each call appends one
JSON line (phase, start, end, pid, keys, bytes, result) to ``$KVCEPH_H200_TRACE``.
``hw/h200/breakdown.py`` turns the lines inside one request's window into the breakdown.

It wraps at LMCache's ``RemoteBackend`` (under both the stock S3 connector and kvceph's
plugin), the ``StorageManager``'s async lookup-and-prefetch, ``LMCacheEngine.retrieve`` / ``store``
and the vLLM paged GPU connectors' copies, so the same phases are measured for both connectors.
Timing is wall clock (``time.time``): a GPU copy launched without a synchronise is timed as
launched; ``retrieve`` (which waits for its copies) bounds it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import sys
import time

_PATH = os.environ.get("KVCEPH_H200_TRACE")

# module -> [(class, method, phase)]
TARGETS = {
    "lmcache.v1.storage_backend.remote_backend": [
        ("RemoteBackend", "batched_async_contains", "contains"),
        ("RemoteBackend", "batched_get_non_blocking", "fetch"),
        ("RemoteBackend", "batched_get_blocking", "fetch_blocking"),
        ("RemoteBackend", "batched_contains", "contains_sync"),
        ("RemoteBackend", "batched_submit_put_task", "put_submit"),
    ],
    "lmcache.v1.storage_backend.storage_manager": [
        ("StorageManager", "async_lookup_and_prefetch", "lookup_prefetch"),
        ("StorageManager", "prefetch_all_done_callback", "respond"),
    ],
    "lmcache.v1.cache_engine": [
        ("LMCacheEngine", "retrieve", "retrieve"),
        ("LMCacheEngine", "store", "store"),
        ("LMCacheEngine", "lookup", "lookup_sync"),
    ],
    "lmcache.v1.gpu_connector.gpu_connectors": [
        ("VLLMPagedMemGPUConnectorV2", "batched_to_gpu", "to_gpu_batched"),
        ("VLLMPagedMemGPUConnectorV2", "to_gpu", "to_gpu"),
        ("VLLMPagedMemGPUConnectorV3", "batched_to_gpu", "to_gpu_batched"),
        ("VLLMPagedMemGPUConnectorV3", "to_gpu", "to_gpu"),
    ],
}
_fd = None
_patched: list[str] = []


def _emit(rec: dict) -> None:
    global _fd
    try:
        if _fd is None:
            _fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        # one write per line with O_APPEND: lines of several processes do not interleave
        os.write(_fd, (json.dumps(rec, default=str) + "\n").encode())
    except OSError:
        pass


def _size(objs) -> int:
    """Bytes of the memory objects a fetch returned (None entries are misses)."""
    total = 0
    try:
        for o in objs or ():
            if o is None:
                continue
            if isinstance(o, tuple):  # (key, obj) pairs
                o = o[-1]
            n = getattr(o, "get_size", None)
            total += int(n()) if callable(n) else 0
    except Exception:  # noqa: BLE001 - tracing never breaks the engine
        pass
    return total


def _describe(phase: str, args: tuple, kwargs: dict, result) -> dict:
    d: dict = {}
    keys = kwargs.get("keys")
    for a in args:
        if keys is None and isinstance(a, list) and a and hasattr(a[0], "chunk_hash"):
            keys = a
        if isinstance(a, str) and "id" not in d:
            d["id"] = a[:80]
    if keys is not None:
        d["n"] = len(keys)
    if phase in ("fetch", "fetch_blocking"):
        d["bytes"] = _size(result)
        d["got"] = sum(1 for o in (result or ()) if o is not None)
    elif phase in ("contains", "contains_sync") and isinstance(result, int):
        d["hit"] = result
    elif phase == "retrieve" and hasattr(result, "sum"):
        try:
            d["hit"] = int(result.sum())
        except Exception:  # noqa: BLE001
            pass
    return d


def _wrap(fn, phase: str):
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrapper(*args, **kwargs):
            t0 = time.time()
            result = None
            try:
                result = await fn(*args, **kwargs)
                return result
            finally:
                rec = {"ph": phase, "t0": t0, "t1": time.time(), "pid": os.getpid()}
                rec.update(_describe(phase, args[1:], kwargs, result))
                _emit(rec)

        return awrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.time()
        result = None
        try:
            result = fn(*args, **kwargs)
            return result
        finally:
            rec = {"ph": phase, "t0": t0, "t1": time.time(), "pid": os.getpid()}
            rec.update(_describe(phase, args[1:], kwargs, result))
            _emit(rec)

    return wrapper


def _patch(module) -> None:
    for cls_name, meth, phase in TARGETS.get(module.__name__, ()):
        cls = getattr(module, cls_name, None)
        fn = cls.__dict__.get(meth) if cls is not None else None
        if fn is None or getattr(fn, "_kvceph_traced", False):
            continue
        wrapped = _wrap(fn, phase)
        wrapped._kvceph_traced = True
        setattr(cls, meth, wrapped)
        _patched.append(f"{cls_name}.{meth}")
    _emit({"ph": "patched", "t0": time.time(), "pid": os.getpid(), "module": module.__name__,
           "methods": list(_patched)})  # fmt: skip


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def _chain() -> None:
    """Run the sitecustomize this one shadows (the image's, if any)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)


if _PATH:
    sys.meta_path.insert(0, _Finder())
try:
    import importlib.util

    _chain()
except Exception:  # noqa: BLE001 - the image's own sitecustomize failing is not ours to fix
    pass
