"""The plugin against real LMCache 0.5.6 classes on the CPU (the connector venv's CPU torch).

LMCache itself builds the remote tier here: CreateStorageBackends reads ``remote_storage_plugins``
and extra_config ``module_path`` / ``class_name`` from a rendered-shape lmcache.yaml, makes its
LocalCPUBackend and a RemoteBackend whose connector is ours (behind LMCache's
InstrumentedRemoteConnector). S3 is tests/fake_s3.py on loopback; the same core runs against
the lab's real RGW in tests/integration/test_s3_connector.py.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lmcache.v1.storage_backend")

from fake_s3 import FakeS3  # noqa: E402
from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend import CreateStorageBackends  # noqa: E402

CHUNK = 16
# (num_layers, 2, chunk_size, num_kv_heads, head_size): 2*2*16*2*8*2 bytes = 2 KiB per chunk
KV_SHAPE = (2, 2, CHUNK, 2, 8)
MODEL = "/var/lib/kvceph/models/Qwen/Qwen3-32B/abc"

YAML = """\
chunk_size: {chunk}
local_cpu: true
max_local_cpu_size: 0.05
remote_serde: naive
remote_storage_plugins: ["kvceph"]
save_unfull_chunk: false
blocking_timeout_secs: 10
extra_config:
  remote_storage_plugin.kvceph.module_path: {module}
  remote_storage_plugin.kvceph.class_name: KvcephConnectorAdapter
  kvceph.endpoint: "{endpoint}"
  kvceph.region: "us-east-1"
  kvceph.tls: false
  kvceph.connections: 8
  kvceph.timeout_s: 2.0
  kvceph.min_hit_tokens: {min_hit}
  kvceph.verify_crc32c: true
  kvceph.skip_short_puts: {skip_short}
  save_chunk_meta: false
"""


@pytest.fixture(scope="module")
def s3():
    server = FakeS3().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "KVTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kvtest-secret")


def build(
    tmp_path, s3, loop, min_hit=0, module="kvceph_connector.lmcache_plugin", skip_short="false"
):
    """LMCache's own backends from a rendered-shape lmcache.yaml: (backends, metadata)."""
    path = tmp_path / "lmcache.yaml"
    path.write_text(
        YAML.format(
            chunk=CHUNK, module=module, endpoint=s3.endpoint, min_hit=min_hit, skip_short=skip_short
        )
    )
    config = LMCacheEngineConfig.from_file(str(path))
    config.validate()
    metadata = LMCacheMetadata(
        model_name=MODEL,
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=torch.bfloat16,
        kv_shape=KV_SHAPE,
        chunk_size=CHUNK,
    )
    return CreateStorageBackends(config, metadata, loop, dst_device="cpu"), metadata


def key(i: int) -> CacheEngineKey:
    return CacheEngineKey(MODEL, 1, 0, 0xABC000 + i, torch.bfloat16)


def filled(cpu, value: int):
    """A full chunk from LocalCPUBackend.allocate, every byte distinct per chunk."""
    metadata = cpu.metadata
    obj = cpu.allocate(metadata.get_shapes(), metadata.get_dtypes())
    raw = obj.byte_array.cast("B")  # LMCache's view is '<B': cast to assign into it
    pattern = bytes((value * 7 + j) % 251 for j in range(len(raw)))
    raw[:] = pattern
    return obj, pattern


def logged(caplog, capfd) -> str:
    """Everything logged so far: LMCache's records (caplog) and the plugin's lines (stderr)."""
    text = caplog.text + capfd.readouterr().err
    caplog.clear()
    return text


def run(loop, coro):
    return asyncio.run_coroutine_threadsafe(coro, loop).result(30)


def test_lmcache_loads_the_plugin_and_round_trips(tmp_path, s3, loop, caplog, capfd):
    backends, _ = build(tmp_path, s3, loop)
    err = logged(caplog, capfd)
    assert "Created remote backend for plugin: kvceph" in err
    assert "kvceph connector 0.1.0 ready for plugin://kvceph (LMCache 0.5.6)" in err
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]
    conn = remote.connection.getWrappedConnector()
    assert type(conn).__name__ == "KvcephS3Connector"

    patterns = []
    for i in range(4):
        obj, pattern = filled(cpu, i)
        patterns.append(pattern)
        remote.submit_put_task(key(i), obj).result(30)
        obj.ref_count_down()
    # The object names are LMCache's own: CacheEngineKey.to_string(), '/' -> '_', bucket root.
    assert s3.name(key(0).to_string()) in s3.objects
    assert key(0).to_string().startswith(MODEL + "@1@0@")
    assert remote.contains(key(0))
    assert remote.batched_contains([key(0), key(1), key(9), key(2)]) == 2

    got = remote.batched_get_blocking([key(0), key(1), key(2), key(3)])
    assert [bytes(o.byte_array) for o in got] == patterns
    for o in got:
        o.ref_count_down()

    # LMCache's async loading path (storage_manager.async_lookup_and_prefetch).
    assert run(loop, remote.batched_async_contains("req", [key(0), key(1), key(7)])) == 2
    objs = run(loop, remote.batched_get_non_blocking("req", [key(0), key(1)]))
    assert [bytes(o.byte_array) for o in objs] == patterns[:2]
    for o in objs:
        o.ref_count_down()

    # A chunk whose stored bytes went bad is never handed to LMCache; the prefix before it is.
    name = s3.name(key(1).to_string())
    s3.faults[name] = "corrupt"
    try:
        objs = run(loop, remote.batched_get_non_blocking("req", [key(0), key(1), key(2)]))
        assert [bytes(o.byte_array) for o in objs] == patterns[:1]
        for o in objs:
            o.ref_count_down()
    finally:
        s3.faults.pop(name)
    assert "kvceph: crc32c since start: refused 1 GET bodies of" in logged(caplog, capfd)
    remote.close()


def test_lmcache_counts_the_plugins_reads_and_writes(tmp_path, s3, loop):
    """LMCache 0.5.6 wraps every remote connector, plugins included, in its
    InstrumentedRemoteConnector (connector/__init__.py CreateConnector): kvceph's GETs and PUTs
    reach lmcache:num_remote_read_bytes / _write_bytes like the stock S3 connector's, which is
    how status.py tells the S3 tier's hits from the DRAM tier's."""
    from lmcache.observability import LMCStatsMonitor

    backends, _ = build(tmp_path, s3, loop)
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]
    assert type(remote.connection).__name__ == "InstrumentedRemoteConnector"
    stats = LMCStatsMonitor.GetOrCreate()
    read0, write0 = stats.interval_remote_read_bytes, stats.interval_remote_write_bytes
    obj, _ = filled(cpu, 40)
    size = obj.get_size()
    remote.submit_put_task(key(40), obj).result(30)
    obj.ref_count_down()
    for o in remote.batched_get_blocking([key(40)]):
        o.ref_count_down()
    assert stats.interval_remote_write_bytes - write0 == size
    assert stats.interval_remote_read_bytes - read0 == size
    remote.close()


def test_min_hit_tokens_reports_zero_and_sends_no_get(tmp_path, s3, loop):
    # 3 chunks of 16 tokens are stored; the crossover asks for 64 tokens: nothing is loaded.
    backends, _ = build(tmp_path, s3, loop, min_hit=64)
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]
    for i in range(10, 13):
        obj, _ = filled(cpu, i)
        remote.submit_put_task(key(i), obj).result(30)
        obj.ref_count_down()
    gets = s3.count("GET")
    keys = [key(i) for i in range(10, 14)]
    assert run(loop, remote.batched_async_contains("r", keys)) == 0
    assert remote.batched_contains(keys) == 0
    assert s3.count("GET") == gets
    # At or above the crossover the hit counts: 4 chunks = 64 tokens.
    obj, _ = filled(cpu, 13)
    remote.submit_put_task(key(13), obj).result(30)
    obj.ref_count_down()
    assert run(loop, remote.batched_async_contains("r", keys)) == 4
    remote.close()


def test_skip_short_puts_stores_only_chunks_a_long_lookup_asked_for(
    tmp_path, s3, loop, caplog, capfd, monkeypatch
):
    """kvceph.skip_short_puts: LMCache's RemoteBackend hands the connector each lookup's keys
    (sync and async) and each put; a key seen only in lookups of fewer chunks than the
    crossover (64 tokens = 4 chunks) is not written, any other key is."""
    import kvceph_connector.admission

    monkeypatch.setattr(kvceph_connector.admission, "REPORT_EVERY_S", 0.0)
    backends, _ = build(tmp_path, s3, loop, min_hit=64, skip_short="true")
    assert "timeout 2.0 s, min_hit_tokens 64, skip_short_puts" in logged(caplog, capfd)
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]

    def put(i):
        obj, _ = filled(cpu, i)
        remote.submit_put_task(key(i), obj).result(30)
        obj.ref_count_down()
        return s3.name(key(i).to_string()) in s3.objects

    puts = s3.count("PUT")
    assert run(loop, remote.batched_async_contains("short", [key(50), key(51)])) == 0
    assert [put(50), put(51)] == [False, False]  # a 2-chunk request: never reported as a hit
    assert s3.count("PUT") == puts
    assert "skipped 2, stored 0 (skipped: seen only in lookups of fewer than 4 chunks)" in logged(
        caplog, capfd
    )
    long = [key(i) for i in (51, 52, 53, 54)]
    assert remote.batched_contains(long) == 0
    assert all(put(i) for i in (51, 52, 53, 54))  # 51 is a long request's prefix now
    assert remote.batched_contains([key(52)]) == 0  # a later short lookup does not undo it
    s3.objects.pop(s3.name(key(52).to_string()))
    assert put(52)
    assert put(70)  # never looked up (a worker without a lookup server): stored
    conn = remote.connection.getWrappedConnector()
    assert (conn.admission.skipped, conn.admission.stored) == (2, 6)
    remote.close()


def test_skip_short_puts_is_off_by_default(tmp_path, s3, loop, caplog, capfd):
    backends, _ = build(tmp_path, s3, loop, min_hit=64)
    # caplog's line ends there: no ", skip_short_puts" after the crossover
    assert "min_hit_tokens 64, crc32c check on\n" in logged(caplog, capfd).replace("\r", "")
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]
    assert remote.batched_contains([key(80)]) == 0
    obj, _ = filled(cpu, 80)
    remote.submit_put_task(key(80), obj).result(30)
    obj.ref_count_down()
    assert s3.name(key(80).to_string()) in s3.objects
    assert remote.connection.getWrappedConnector().admission is None
    remote.close()


def test_a_miss_is_not_remembered(tmp_path, s3, loop):
    backends, _ = build(tmp_path, s3, loop)
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]
    assert remote.batched_contains([key(20)]) == 0
    # Another writer (here: straight into the bucket) stores the chunk after the miss.
    obj, pattern = filled(cpu, 20)
    s3.objects[s3.name(key(20).to_string())] = (bytes(pattern), {})  # stock-written: no crc
    obj.ref_count_down()
    assert remote.batched_contains([key(20)]) == 1
    got = remote.batched_get_blocking([key(20)])
    assert bytes(got[0].byte_array) == pattern  # accepted on size alone
    got[0].ref_count_down()
    remote.close()


def test_lookup_counts_no_chunk_its_get_would_refuse(tmp_path, s3, loop, caplog, capfd):
    """An object of the wrong size, or whose size metadata disagrees, is no hit: the engine
    never plans to load what the GET then refuses (and recomputes part of the prefix)."""
    backends, _ = build(tmp_path, s3, loop)
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]
    for i in range(30, 34):
        obj, _ = filled(cpu, i)
        remote.submit_put_task(key(i), obj).result(30)
        obj.ref_count_down()
    keys = [key(i) for i in range(30, 34)]
    assert remote.batched_contains(keys) == 4
    short = s3.name(key(31).to_string())
    data, meta = s3.objects[short]
    s3.objects[short] = (data[:-16], meta)  # a chunk of the wrong size
    assert remote.batched_contains(keys) == 1
    assert run(loop, remote.batched_async_contains("r", keys)) == 1
    assert not remote.contains(key(31))
    s3.objects[short] = (data, {**meta, "x-amz-meta-kvceph-size": str(len(data) - 1)})
    assert remote.batched_contains(keys) == 1
    assert "misses (size)" in logged(caplog, capfd)
    remote.close()


def test_lmcache_giving_up_frees_the_buffers(tmp_path, s3, loop, caplog, capfd):
    # RemoteBackend bounds a load with asyncio.wait_for(blocking_timeout_secs): the cancelled
    # load must stop writing into its MemoryObjs and give them back.
    backends, _ = build(tmp_path, s3, loop)
    remote, cpu = backends["RemoteBackend-kvceph"], backends["LocalCPUBackend"]
    obj, _ = filled(cpu, 30)
    remote.submit_put_task(key(30), obj).result(30)
    obj.ref_count_down()
    conn = remote.connection.getWrappedConnector()
    taken = []
    allocate = conn._allocate
    conn._allocate = lambda: taken.append(allocate()) or taken[-1]
    s3.faults[s3.name(key(30).to_string())] = "drip"
    try:
        with pytest.raises(TimeoutError):
            run(loop, asyncio.wait_for(conn.batched_get_non_blocking("r", [key(30)] * 2), 0.3))
    finally:
        s3.faults.clear()
    assert len(taken) == 2 and [o.get_ref_count() for o in taken] == [0, 0]
    # The cancelled GETs end on CRT's threads and log their line then: let them, before the
    # test's log capture goes (a late line printed "--- Logging error ---" into the run).
    deadline, err = time.monotonic() + 10, ""
    while "abandoned by the caller" not in err and time.monotonic() < deadline:
        time.sleep(0.05)
        err += logged(caplog, capfd)
    assert "abandoned by the caller" in err
    remote.close()


def refused(tmp_path, s3, loop, caplog, capfd, why: str, **kwargs) -> str:
    """Build with ``kwargs``: LMCache logs that the connection failed, ``why``, and still adds
    the backend, with no connection (every lookup is 0). Returns what was logged."""
    backends, _ = build(tmp_path, s3, loop, **kwargs)
    err = logged(caplog, capfd)
    assert f"Failed to initialize/re-establish remote connection: {why}" in err
    assert backends["RemoteBackend-kvceph"].connection is None
    return err


def test_broken_module_path_is_logged_by_lmcache(tmp_path, s3, loop, caplog, capfd):
    why = "No adapter found for URL: plugin://kvceph"
    module = "kvceph_connector.no_such_module"
    err = refused(tmp_path, s3, loop, caplog, capfd, why, module=module)
    assert (
        "Failed to load remote connector kvceph due to import/attribute error: "
        "No module named 'kvceph_connector.no_such_module'" in err
    )
    assert "Created remote backend for plugin: kvceph" in err
    assert "ready for plugin://kvceph" not in err


def test_bad_kvceph_value_is_lmcaches_failure_line(tmp_path, s3, loop, caplog, capfd):
    why = "kvceph.min_hit_tokens must be >= 0, not -5"
    refused(tmp_path, s3, loop, caplog, capfd, why, min_hit="-5")


def test_unsupported_lmcache_is_not_loaded(tmp_path, s3, loop, caplog, capfd, monkeypatch):
    import kvceph_connector.versions

    monkeypatch.setattr(kvceph_connector.versions, "lmcache_version", lambda: "0.9.9")
    monkeypatch.delitem(sys.modules, "kvceph_connector.lmcache_plugin")
    backends, _ = build(tmp_path, s3, loop)
    err = logged(caplog, capfd)
    assert (
        "Failed to load remote connector kvceph due to import/attribute error: "
        "kvceph-connector 0.1.0 supports LMCache 0.5.6, not the installed 0.9.9: install a "
        "supported LMCache or use the stock connector (kvceph_lmcache_connector: lmcache)"
    ) in err
    assert backends["RemoteBackend-kvceph"].connection is None


def test_unsupported_lmcache_is_refused_in_one_line():
    from kvceph_connector.lmcache_plugin import check_lmcache_version

    check_lmcache_version("0.5.6")
    with pytest.raises(ImportError) as info:
        check_lmcache_version("0.6.0")
    assert str(info.value) == (
        "kvceph-connector 0.1.0 supports LMCache 0.5.6, not the installed 0.6.0: install a "
        "supported LMCache or use the stock connector (kvceph_lmcache_connector: lmcache)"
    )


def test_bad_kvceph_keys_are_one_line_errors():
    from kvceph_connector.lmcache_plugin import settings_from_extra

    base = {"kvceph.endpoint": "lmcache.s3.kvlab:443"}
    config, min_hit, skip_short = settings_from_extra({**base, "kvceph.tls": "false"})
    assert (config.tls, config.connections, config.timeout_s, min_hit) == (False, 16, 5.0, 0)
    assert skip_short is False
    assert settings_from_extra({**base, "kvceph.skip_short_puts": "true"}).skip_short_puts
    assert config.refresh_s == 60.0
    assert config.verify_crc32c is True  # the default since issue 50 item 2
    assert not settings_from_extra({**base, "kvceph.verify_crc32c": "false"})[0].verify_crc32c
    assert settings_from_extra({**base, "kvceph.refresh_s": 15})[0].refresh_s == 15.0
    for extra, text in [
        ({**base, "kvceph.conections": 4}, "unknown extra_config key kvceph.conections"),
        ({}, "kvceph.endpoint is required"),
        ({**base, "kvceph.tls": "maybe"}, "kvceph.tls must be true or false"),
        ({**base, "kvceph.connections": 0}, "kvceph.connections must be >= 1"),
        ({**base, "kvceph.refresh_s": -1}, "kvceph.refresh_s must be >= 0"),
        ({**base, "kvceph.verify_crc32c": "sometimes"}, "kvceph.verify_crc32c must be true or"),
        ({**base, "kvceph.skip_short_puts": "on"}, "kvceph.skip_short_puts must be true or"),
        ({**base, "save_chunk_meta": True}, "save_chunk_meta must be false"),
        ({"kvceph.endpoint": "https://lmcache.s3.kvlab"}, "no scheme, no path"),
    ]:
        with pytest.raises(ValueError, match=text):
            settings_from_extra(extra)
