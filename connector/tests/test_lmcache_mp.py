"""The MP plugin inside LMCache 0.5.6's own L2 classes on the CPU, against tests/fake_s3.py.

LMCache builds the adapter exactly as ``lmcache server`` does: the ``--l2-adapter`` JSON through
its argparse group and ``parse_args_to_l2_adapters_config``, then the registry's factory, which
imports this module, calls ``KvcephMPConnector(**adapter_params)`` and wraps it in
``NativeConnectorL2Adapter``. Objects are LMCache TensorMemoryObjs from its TensorMemoryAllocator
(what L1 hands to L2), keys real ObjectKeys. The last test runs the whole MP storage path:
LMCache's StorageManager (L1, its store controller putting to L2, its prefetch controller
loading back) over the same plugin.
"""

from __future__ import annotations

import argparse
import json
import select
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lmcache.v1.distributed.l2_adapters")

from fake_s3 import FakeS3  # noqa: E402
from lmcache.v1.distributed.api import ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters.config import (  # noqa: E402
    add_l2_adapters_args,
    parse_args_to_l2_adapters_config,
)
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry  # noqa: E402
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
)
from lmcache.v1.memory_allocators.tensor_memory_allocator import (  # noqa: E402
    TensorMemoryAllocator,
)

from kvceph_connector import lmcache_mp  # noqa: E402
from kvceph_connector.s3core import CRC_HEADER, SIZE_HEADER, crc32c, object_path  # noqa: E402

MODEL = "/var/lib/kvceph/models/Qwen/Qwen3-32B/abc"
PREFIX = "kvceph-mp.vllm034.bfloat16@"
SHAPE = torch.Size([2, 16, 64])  # 4 KiB of bfloat16 per object
DTYPE = torch.bfloat16


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "KVTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kvtest-secret")


@pytest.fixture()
def s3():
    server = FakeS3().start()
    yield server
    server.stop()


class Allocator:
    """LMCache's TensorMemoryAllocator; every object goes back to it at the test's end."""

    def __init__(self):
        self.inner = TensorMemoryAllocator(torch.zeros(1 << 20, dtype=torch.uint8))
        self.objs = []

    def allocate(self, shape, dtype):
        obj = self.inner.allocate(shape, dtype)
        self.objs.append(obj)
        return obj


@pytest.fixture()
def allocator():
    a = Allocator()
    yield a
    for obj in a.objs:
        obj.ref_count_down()


def spec(s3, **params) -> str:
    """The --l2-adapter JSON as kvceph renders it (no credentials)."""
    adapter = {
        "endpoint": s3.endpoint,
        "tls": False,
        "connections": 4,
        "timeout_s": 1.0,
        "prefix": PREFIX,
        **params,
    }
    return json.dumps(
        {
            "type": "native_plugin",
            "shared": True,
            "module_path": "kvceph_connector.lmcache_mp",
            "class_name": "KvcephMPConnector",
            "adapter_params": adapter,
        }
    )


def build(s3, **params):
    """LMCache's adapter from the JSON, the way its server builds it."""
    parser = add_l2_adapters_args(argparse.ArgumentParser())
    args = parser.parse_args(["--l2-adapter", spec(s3, **params)])
    config = parse_args_to_l2_adapters_config(args)
    (one,) = config.adapters
    assert one.shared
    adapter = create_l2_adapter_from_registry(one)
    assert isinstance(adapter, NativeConnectorL2Adapter)
    return adapter


@pytest.fixture()
def adapter(s3):
    a = build(s3)
    yield a
    a.close()


def key(i: int, rank: int = 0) -> ObjectKey:
    return ObjectKey(chunk_hash=bytes([i]) * 32, model_name=MODEL, kv_rank=rank)


def name(s3, k: ObjectKey, prefix: str = PREFIX) -> str:
    """The object's path as S3 sees it: prefix + LMCache's key string, the core's quoting."""
    wire = f"{k.model_name}@{k.kv_rank:08x}@{k.object_group_id:x}@{k.chunk_hash.hex()}"
    return s3.name(prefix + wire)


def filled(allocator, value: int):
    obj = allocator.allocate(SHAPE, DTYPE)
    raw = obj.byte_array.cast("B")
    pattern = bytes((value * 7 + j) % 251 for j in range(len(raw)))
    raw[:] = pattern
    return obj, pattern


def empty(allocator):
    obj = allocator.allocate(SHAPE, DTYPE)
    obj.byte_array.cast("B")[:] = bytes(obj.get_size())
    return obj


def wait(fd: int, query, timeout: float = 10.0):
    """LMCache's way: poll the task kind's eventfd, then query until the result is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        select.select([fd], [], [], 0.2)
        got = query()
        if got is not None:
            return got
    raise AssertionError("no completion")


def store(a, keys, objs):
    task = a.submit_store_task(keys, objs)
    return wait(a.get_store_event_fd(), lambda: a.pop_completed_store_tasks().get(task))


def lookup(a, keys) -> list[bool]:
    task = a.submit_lookup_and_lock_task(keys, {})
    bitmap = wait(a.get_lookup_and_lock_event_fd(), lambda: a.query_lookup_and_lock_result(task))
    a.submit_unlock(keys)
    return [bitmap.test(i) for i in range(len(keys))]


def load(a, keys, objs) -> list[bool]:
    task = a.submit_load_task(keys, objs)
    bitmap = wait(a.get_load_event_fd(), lambda: a.query_load_result(task))
    return [bitmap.test(i) for i in range(len(keys))]


def raw(obj) -> bytes:
    return bytes(obj.byte_array.cast("B"))


def test_store_lookup_load_round_trip_through_lmcaches_adapter(adapter, s3, allocator):
    keys = [key(1), key(2, rank=0x01000100)]
    objs, patterns = zip(*(filled(allocator, i) for i in (1, 2)), strict=True)
    result = store(adapter, keys, list(objs))
    assert result == 2 * objs[0].get_size()  # L2StoreResult: the bytes stored, -1 failed
    for k, pattern in zip(keys, patterns, strict=True):
        data, meta = s3.objects[name(s3, k)]
        assert data == pattern
        assert meta == {CRC_HEADER: str(crc32c(pattern)), SIZE_HEADER: str(len(pattern))}
    # the documented name: prefix + LMCache's key, '/' -> '_', '@' quoted, at the bucket root
    assert object_path(PREFIX + f"{MODEL}@00000000@0@{'01' * 32}") == (
        "/kvceph-mp.vllm034.bfloat16%40_var_lib_kvceph_models_Qwen_Qwen3-32B_abc%4000000000%400%40"
        + "01" * 32
    )
    assert lookup(adapter, keys + [key(3)]) == [True, True, False]
    dst = [empty(allocator) for _ in keys]
    assert load(adapter, keys, dst) == [True, True]
    assert [raw(o) for o in dst] == list(patterns)
    connector = adapter._client
    assert connector.counters == {
        "lookups": 3,
        "hits": 2,
        "loads": 2,
        "loaded": 2,
        "stores": 2,
        "stored": 2,
        "deletes": 0,
    }
    adapter.delete([keys[0]])
    assert name(s3, keys[0]) not in s3.objects
    assert lookup(adapter, keys) == [False, True]  # no positive cache: the delete is seen


def test_a_miss_is_a_clear_bit_and_nothing_is_written(adapter, s3, allocator):
    dst = empty(allocator)
    assert lookup(adapter, [key(9)]) == [False]
    assert load(adapter, [key(9)], [dst]) == [False]
    assert raw(dst) == bytes(dst.get_size())
    # no negative cache either: an object another host writes later is found by the next lookup
    obj, pattern = filled(allocator, 9)
    s3.objects[name(s3, key(9))] = (pattern, {})
    assert lookup(adapter, [key(9)]) == [True]
    assert load(adapter, [key(9)], [dst]) == [True] and raw(dst) == pattern


def test_a_corrupt_body_of_the_right_size_is_refused(adapter, s3, allocator):
    obj, pattern = filled(allocator, 4)
    assert store(adapter, [key(4)], [obj]) >= 0
    s3.faults[name(s3, key(4))] = "corrupt"  # one byte flipped, size and metadata intact
    assert lookup(adapter, [key(4)]) == [True]
    assert load(adapter, [key(4)], [empty(allocator)]) == [False]
    del s3.faults[name(s3, key(4))]
    assert load(adapter, [key(4)], [dst := empty(allocator)]) == [True] and raw(dst) == pattern


def test_an_object_of_another_size_is_refused(s3, allocator):
    obj, pattern = filled(allocator, 5)
    a = build(s3, object_bytes=obj.get_size())
    try:
        s3.objects[name(s3, key(5))] = (pattern[:-2], {})
        s3.objects[name(s3, key(6))] = (pattern + b"xy", {})
        s3.objects[name(s3, key(7))] = (pattern, {})
        # sized lookup: the wrong-sized ones are misses before any GET is planned
        assert lookup(a, [key(5), key(6), key(7)]) == [False, False, True]
        gets = s3.count("GET")
        assert load(a, [key(5), key(6), key(7)], [empty(allocator) for _ in range(3)]) == [
            False,
            False,
            True,
        ]
        assert s3.count("GET") > gets
    finally:
        a.close()


def test_a_failed_put_fails_the_store_batch(adapter, s3, allocator):
    (o1, _), (o2, _) = filled(allocator, 1), filled(allocator, 2)
    s3.faults[name(s3, key(2))] = "403"
    result = store(adapter, [key(1), key(2)], [o1, o2])
    assert result == -1


def test_s3_down_then_back_recovers_without_a_restart(s3, allocator):
    port = s3.server_address[1]
    a = build(s3)
    try:
        obj, pattern = filled(allocator, 8)
        assert store(a, [key(8)], [obj]) >= 0
        objects = dict(s3.objects)
        s3.stop()
        t0 = time.monotonic()
        assert lookup(a, [key(8)]) == [False]  # a miss, not an exception
        assert load(a, [key(8)], [empty(allocator)]) == [False]
        assert store(a, [key(10)], [filled(allocator, 10)[0]]) == -1
        assert time.monotonic() - t0 < 8  # connection refused fails fast, then backs off
        back = FakeS3(port=port).start()
        back.objects.update(objects)
        try:
            deadline = time.monotonic() + 20
            while lookup(a, [key(8)]) != [True]:
                assert time.monotonic() < deadline, "the tier never came back"
                time.sleep(0.3)
            dst = empty(allocator)
            assert load(a, [key(8)], [dst]) == [True] and raw(dst) == pattern
            assert a.report_status()["is_healthy"]
        finally:
            back.stop()
    finally:
        a.close()


def test_path_style_puts_the_bucket_in_the_path(s3, allocator):
    a = build(s3, addressing="path", bucket="kvcache", prefix="")
    try:
        obj, pattern = filled(allocator, 3)
        assert store(a, [key(3)], [obj]) >= 0
        assert s3.objects["/kvcache" + name(s3, key(3), prefix="")][0] == pattern
        assert lookup(a, [key(3)]) == [True]
        assert load(a, [key(3)], [dst := empty(allocator)]) == [True] and raw(dst) == pattern
    finally:
        a.close()


@pytest.mark.parametrize(
    "params, words",
    [
        ({"aws_secret_access_key": "x"}, "credentials never go into adapter_params"),
        ({"access_key_id": "x"}, "credentials never go into adapter_params"),
        ({"min_hit_tokens": 256}, "unknown kvceph MP adapter_params key 'min_hit_tokens'"),
        ({"prefix": "a/b@"}, "prefix 'a/b@' may hold only"),
        ({"addressing": "path"}, "addressing 'path' needs bucket"),
        ({"bucket": "other"}, "is not the first label of endpoint"),
        ({"ca_file": "/nonexistent.pem"}, "ca_file '/nonexistent.pem' is not a file"),
        ({"tls": "maybe"}, "tls must be true or false"),
    ],
)
def test_bad_adapter_params_are_refused_in_one_line(s3, params, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")) as err:
        build(s3, **params)
    assert "\n" not in str(err.value)
    assert "kvtest-secret" not in str(err.value)


def test_completions_never_outlive_close(s3):
    c = lmcache_mp.KvcephMPConnector(endpoint=s3.endpoint, tls=False, timeout_s=1.0)
    fid = c.submit_batch_exists(["a", "b"])
    deadline = time.monotonic() + 5
    got = []
    while not got and time.monotonic() < deadline:
        select.select([c.event_fd()], [], [], 0.2)
        got = c.drain_completions()
    assert got == [(fid, True, "", [False, False])]
    c.close()
    c.close()  # twice is fine
    assert c.drain_completions() == []


# --- The whole MP storage path: LMCache's StorageManager (L1, store and prefetch controllers) ---


def storage_manager(s3, **params):
    """LMCache's StorageManager as ``lmcache server`` builds it (a 10 MiB L1, our L2)."""
    pytest.importorskip("opentelemetry")  # LMCache's MP observability (requirements-cpu.txt)
    from lmcache.v1.distributed.config import add_storage_manager_args, parse_args_to_config
    from lmcache.v1.distributed.storage_manager import StorageManager

    parser = add_storage_manager_args(argparse.ArgumentParser())
    args = parser.parse_args(
        ["--l1-size-gb", "0.01", "--eviction-policy", "LRU", "--l2-adapter", spec(s3, **params)]
    )
    return StorageManager(parse_args_to_config(args))


def test_lmcaches_storage_manager_stores_to_s3_and_prefetches_back(s3):
    from lmcache.v1.distributed.api import GroupedObjectKeys, MemoryLayoutDesc, PrefetchTaskSpec

    sm = storage_manager(s3)
    try:
        layout = MemoryLayoutDesc(shapes=[SHAPE], dtypes=[DTYPE])
        keys = [key(i) for i in range(4)]
        patterns = {}
        for k, obj in sm.reserve_write(keys, layout).items():
            view = obj.byte_array.cast("B")
            patterns[k] = bytes((k.chunk_hash[0] * 13 + j) % 251 for j in range(len(view)))
            view[:] = patterns[k]
        sm.finish_write(keys)
        # LMCache's store controller puts L1's new objects to L2 in the background
        deadline = time.monotonic() + 10
        while len(s3.objects) < 4:
            assert time.monotonic() < deadline, "the store controller never put them"
            time.sleep(0.05)
        assert all(s3.objects[name(s3, k)][0] == patterns[k] for k in keys)
        s3.faults[name(s3, keys[2])] = "corrupt"  # right size, wrong bytes: refused on load
        sm.clear(force=True)  # POST /cache/clear: the next read must come from S3
        row = GroupedObjectKeys(keys=keys + [key(9)], object_group_id=0, layout_desc=layout)
        handle = sm.submit_prefetch_task(PrefetchTaskSpec(key_groups=[row]))
        assert sm.wait_prefetch_status(handle, 10)
        result = sm.query_prefetch_status(handle)
        # the prefix up to the refused chunk, all from L2
        assert (result.hit_cells[0].popcount(), result.l2_hit_cells[0].popcount()) == (2, 2)
        with sm.read_prefetched_results(keys[:2]) as got:
            assert [raw(o) for o in got] == [patterns[k] for k in keys[:2]]
    finally:
        sm.close()


def test_kvcephs_namespace_is_the_cores_folder_and_must_be_one():
    ns = "kv/Qwen%2FQwen3-32B@tp2@pp1@-@bfloat16@c256@kv-packed@naive@none@mp-lmcache0.5/"
    got = lmcache_mp.mp_settings({"endpoint": "lmcache.s3.kvlab:443", "namespace": ns})
    assert got.s3.namespace == ns and got.prefix == ""
    # the object sits in the namespace's folder, as an in-process one does
    assert object_path("m@00000000@0@ab", got.s3.namespace).startswith(
        "/kv/Qwen%252FQwen3-32B%40tp2"
    )
    with pytest.raises(ValueError, match="folder"):
        lmcache_mp.mp_settings({"endpoint": "lmcache.s3.kvlab:443", "namespace": "kv/no-slash"})
