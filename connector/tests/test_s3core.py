"""The S3 core against tests/fake_s3.py on loopback: the faults a real RGW does not do on demand.

The same core runs byte-exact against the lab's real RGW (https and http), with an RGW stopped
mid-read and a cut upload, in tests/integration/test_s3_connector.py.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from urllib.parse import quote

import pytest
from fake_s3 import FakeS3

from kvceph_connector import s3core
from kvceph_connector.s3core import CRC_HEADER, SIZE_HEADER, S3Config, S3Core, crc32c, object_path

KEY = "/var/lib/kvceph/models/Qwen/Qwen3-32B/abc@1@0@5a5a@bfloat16"


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "KVTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kvtest-secret")


@pytest.fixture()
def s3():
    server = FakeS3().start()
    server.slow_s = 2.0
    yield server
    server.stop()


@pytest.fixture(params=["on_body", "receive_dir"])
def core(s3, request, tmp_path):
    # Both ways a GET's body can reach the buffer: every test of the core runs with each.
    receive = str(tmp_path / "recv") if request.param == "receive_dir" else None
    if receive:
        os.mkdir(receive)
    # Every check on (the crc32c one is the default; test_the_crc32c_check_can_be_off: off).
    c = S3Core(
        S3Config(
            endpoint=s3.endpoint,
            tls=False,
            connections=8,
            timeout_s=0.8,
            receive_dir=receive,
            verify_crc32c=True,
        )
    )
    yield c
    c.close()
    if receive:  # every body file is gone once its GET ended, faults and abandons included
        deadline = time.monotonic() + 5
        while os.listdir(receive) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.listdir(receive) == []


def warnings(caplog) -> list[str]:
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("kvceph_connector") and r.levelno >= logging.WARNING
    ]
    caplog.clear()
    return lines


def test_object_path_is_lmcache_s3_connectors():
    # lmcache 0.5.6 S3Connector._format_safe_path: '/' -> '_', url-quoted, bucket root.
    assert (
        object_path(KEY) == "/_var_lib_kvceph_models_Qwen_Qwen3-32B_abc%401%400%405a5a%40bfloat16"
    )


def test_round_trip_is_byte_exact_across_ranged_parts(core, s3):
    data = os.urandom((20 << 20) + 123)  # three 8 MiB ranged parts, the last one short
    assert core.put(KEY, data)
    stored, meta = s3.objects[s3.name(KEY)]
    assert stored == data
    assert meta == {CRC_HEADER: str(crc32c(data)), SIZE_HEADER: str(len(data))}
    assert core.lookup([KEY, KEY + "x"]) == [len(data), None]
    buf = bytearray(len(data))
    assert core.get_into(KEY, buf, len(data))
    assert buf == data
    assert s3.count("GET") >= 3  # CRT split it: parts landed at their offsets
    assert core.delete([KEY]) == [True]
    assert core.lookup([KEY]) == [None]


@pytest.mark.parametrize(
    "wrap", [bytes, bytearray, lambda d: memoryview(bytearray(d)), lambda d: memoryview(d)]
)
def test_put_bodies_of_every_kind_are_byte_exact(core, s3, wrap):
    data = os.urandom((3 << 20) + 7)
    assert core.put(KEY, wrap(data))
    assert s3.objects[s3.name(KEY)][0] == data


def test_the_body_copy_runs_outside_the_gil(monkeypatch):
    # ctypes.memmove drops the GIL for the copy; a slice assignment would hold it, and in
    # the engine that stalled prefill (the 2026-12-01 H200 run: ~0.7 s per GB written).
    calls = []
    real = ctypes.memmove
    monkeypatch.setattr(ctypes, "memmove", lambda d, s, n: calls.append(n) or real(d, s, n))
    for source in (bytearray(os.urandom(100_000)), os.urandom(100_000)):
        body, out = s3core._Body(source), bytearray()
        chunk = bytearray(40_000)
        while n := body.readinto(memoryview(chunk)):
            out += chunk[:n]
        assert out == source
    assert calls == [40_000, 40_000, 20_000] * 2
    # a read-only view that is not bytes (no address to take) is still copied, by slice
    body, chunk = s3core._Body(memoryview(b"abc")), bytearray(8)
    assert body.readinto(memoryview(chunk)) == 3 and chunk[:3] == b"abc"


def test_lookups_are_concurrent_and_misses_are_not_cached(core, s3):
    keys = [f"{KEY}-{i}" for i in range(32)]
    s3.head_delay_s = 0.1
    started = time.monotonic()
    assert core.lookup(keys) == [None] * 32
    took = time.monotonic() - started
    # The server's own count is the proof; the clock only says it was not one after another
    # (3.2 s that way, ~0.4 s with 8 connections: the bound leaves a loaded machine room).
    assert s3.max_in_flight >= 4
    assert took < 2.4, took
    # A second client (another host) writes one of them after the miss: the next lookup finds it.
    other = S3Core(S3Config(endpoint=s3.endpoint, tls=False))
    assert other.put(keys[5], b"kv" * 100)
    other.close()
    s3.head_delay_s = 0.0
    assert core.lookup(keys)[5] == 200


def test_the_crc32c_check_can_be_off(s3):
    # Off: a body of the right size whose bytes went bad is handed over, one that is short is
    # not; every put still stores the crc32c, so the check can be turned on again.
    data = os.urandom(1 << 20)
    assert S3Config(endpoint=s3.endpoint).verify_crc32c  # the default
    plain = S3Core(S3Config(endpoint=s3.endpoint, tls=False, timeout_s=0.8, verify_crc32c=False))
    try:
        assert plain.put(KEY, data)
        assert s3.objects[s3.name(KEY)][1][CRC_HEADER] == str(crc32c(data))
        s3.faults[s3.name(KEY)] = "corrupt"
        buf = bytearray(len(data))
        assert plain.get_into(KEY, buf, len(data)) and bytes(buf) != data
        s3.faults[s3.name(KEY)] = "short"
        assert not plain.get_into(KEY, bytearray(len(data)), len(data))
    finally:
        s3.faults.pop(s3.name(KEY), None)
        plain.close()


def test_stock_written_object_is_accepted_on_size(core, s3):
    s3.objects[s3.name(KEY)] = (b"x" * 4096, {})
    buf = bytearray(4096)
    assert core.lookup([KEY]) == [4096]
    assert core.get_into(KEY, buf, 4096) and buf == b"x" * 4096
    assert not core.get_into(KEY, bytearray(8192), 8192)  # size is still checked


@pytest.mark.parametrize(
    "fault, kind",
    [
        ("corrupt", "crc32c"),
        ("short", "size"),
        ("stall", "timeout"),
        ("slow", "timeout"),
        ("truncate", "connection"),
        ("403", "403"),
        ("500", "500"),
        (None, "404"),
    ],
)
def test_every_get_fault_is_a_miss_with_one_line(core, s3, caplog, fault, kind):
    data = os.urandom(1 << 20)
    assert core.put(KEY, data)
    if fault is None:
        s3.objects.clear()
    else:
        s3.faults[s3.name(KEY)] = fault
    caplog.set_level(logging.DEBUG, logger="kvceph_connector")
    buf = bytearray(b"\0" * len(data))
    started = time.monotonic()
    assert core.get_many_into([(KEY, buf, len(data))]) == [False]
    assert time.monotonic() - started < 3.0
    lines = warnings(caplog)
    assert len(lines) == 1, lines
    if kind == "crc32c":  # the running count of refusals (test_s3core_release.py: its rate)
        assert lines[0].startswith("kvceph: crc32c since start: refused 1 GET bodies of 1 ")
        assert f"last {KEY}: crc32c " in lines[0] and " != stored " in lines[0]
    else:
        assert f"1 of 1 misses ({kind}), first {KEY}" in lines[0]


def test_a_slow_transfer_is_no_timeout_while_the_core_moves(core, s3, caplog):
    # awscrt delivers a GET's part in one piece: a 1 MiB object dripping in over 1.5 s gives no
    # callback for 1.5 s > timeout_s 0.8. Alone, that is a stall; beside requests that finish,
    # it is a busy link, and it completes (a request alone without progress for 3 x timeout_s
    # still times out).
    data = os.urandom(1 << 20)
    assert core.put(KEY, data)
    s3.faults[s3.name(KEY)] = "drip"
    buf = bytearray(len(data))
    assert not core.get_into(KEY, buf, len(data))
    assert "no progress for 0.8 s" in warnings(caplog)[0]
    pending = core.get_many_into_future([(KEY, buf, len(data))])
    while not pending.done():
        core.lookup([KEY + "-other"])  # other requests of the core keep finishing
        time.sleep(0.1)
    assert pending.result() == [True] and buf == data
    assert warnings(caplog) == []


def test_an_abandoned_batch_never_writes_again(core, s3):
    data = os.urandom(1 << 20)
    assert core.put(KEY, data)
    s3.faults[s3.name(KEY)] = "drip"
    buf = bytearray(len(data))
    batch = core.get_many_into_future([(KEY, buf, len(data))] * 3)
    time.sleep(0.2)
    core.abandon(batch)
    assert batch.result(5) == [False, False, False]
    time.sleep(s3.drip_s)  # the body would have arrived by now
    assert buf == bytearray(len(data))


def test_head_faults_are_misses(core, s3, caplog):
    s3.objects[s3.name(KEY)] = (b"x" * 10, {})
    s3.faults[s3.name(KEY)] = "403"
    assert core.lookup([KEY, KEY + "-absent"]) == [None, None]
    lines = warnings(caplog)
    assert len(lines) == 1 and "1 of 2 misses (403)" in lines[0], lines
    s3.faults[s3.name(KEY)] = "slow"
    assert core.lookup([KEY]) == [None]
    assert "misses (timeout)" in warnings(caplog)[0]


def test_connection_refused_backs_off_then_recovers(s3, caplog):
    port = s3.server_address[1]
    core = S3Core(S3Config(endpoint=s3.endpoint, tls=False, timeout_s=1.0))
    assert core.put(KEY, b"abc")
    s3.stop()
    assert core.lookup([KEY]) == [None]
    first = warnings(caplog)
    assert len(first) == 1 and "(connection)" in first[0], first
    assert "every S3 request is a miss for 0.5 s, then S3 is tried again" in first[0]
    # During the back-off: misses without a request, and no more warnings.
    assert core.lookup([KEY] * 10) == [None] * 10
    assert warnings(caplog) == []
    back = FakeS3(port).start()
    try:
        back.objects[back.name(KEY)] = (b"abc", {})
        deadline = time.monotonic() + 10
        while core.lookup([KEY]) != [3]:
            assert time.monotonic() < deadline, "the core never came back"
            time.sleep(0.2)
        assert any("reachable again" in line for line in warnings(caplog))
    finally:
        core.close()
        back.stop()


def test_put_faults_fail_with_one_line(core, s3, caplog):
    s3.faults[s3.name(KEY)] = "403"
    assert core.put_many([(KEY, b"a"), (KEY, b"b")]) == [False, False]
    lines = warnings(caplog)
    assert len(lines) == 1 and "put at" in lines[0] and "2 of 2 failed (403)" in lines[0]


def test_bad_config_is_one_line():
    for kwargs, text in [
        ({"endpoint": "http://lmcache.s3.kvlab"}, "no scheme, no path"),
        ({"endpoint": "b.s3", "connections": 0}, "connections must be >= 1"),
        ({"endpoint": "b.s3", "timeout_s": 0}, "timeout_s must be > 0"),
        ({"endpoint": "b.s3", "access_key_id": "A"}, "need both"),
    ]:
        with pytest.raises(ValueError, match=text):
            S3Config(**kwargs)
    assert S3Config(endpoint="lmcache.s3.kvlab:443").bucket == "lmcache"


@pytest.mark.parametrize(
    ("stored", "meta", "kind"),
    [
        (4095, {}, "size"),  # not a whole chunk: the GET expects 4096
        (4096, {SIZE_HEADER: "4095"}, "size"),
        (4096, {CRC_HEADER: "not-a-crc"}, "checksum"),
        (4096, {CRC_HEADER: str(1 << 32)}, "checksum"),
    ],
)
def test_a_sized_lookup_refuses_what_the_get_would(core, s3, caplog, stored, meta, kind):
    """The lookup applies the GET's rule to HEAD's headers: no hit the load then refuses."""
    s3.objects[s3.name(KEY)] = (b"x" * stored, meta)
    caplog.set_level(logging.DEBUG, logger="kvceph_connector")
    assert core.lookup([KEY], 4096) == [None]
    assert f"1 of 1 misses ({kind})" in warnings(caplog)[0]
    assert not core.get_into(KEY, bytearray(4096), 4096)  # the GET agrees


def test_a_sized_lookup_accepts_what_the_get_accepts(core, s3):
    data = os.urandom(4096)
    assert core.put(KEY, data)
    s3.objects[s3.name(KEY + "-stock")] = (b"y" * 4096, {})  # written by LMCache's own
    assert core.lookup([KEY, KEY + "-stock"], 4096) == [4096, 4096]
    assert core.get_into(KEY, bytearray(4096), 4096)
    assert core.get_into(KEY + "-stock", bytearray(4096), 4096)


NAMESPACE = "kv/Qwen%2FQwen3-32B@tp1@pp1@-@bfloat16@c256@kv-split@naive@none/"


def test_a_namespace_is_a_folder_before_lmcaches_name(s3):
    # deploys/settings/namespace.py: only the key's own slashes become underscores.
    assert object_path(KEY, NAMESPACE) == "/" + quote(NAMESPACE) + object_path(KEY)[1:]
    with pytest.raises(ValueError, match="must be '<folder>/'"):
        S3Config(endpoint=s3.endpoint, namespace="kv/no-slash")
    plain = S3Core(S3Config(endpoint=s3.endpoint, tls=False, timeout_s=2.0))
    spaced = S3Core(S3Config(endpoint=s3.endpoint, tls=False, timeout_s=2.0, namespace=NAMESPACE))
    try:
        assert spaced.put_many([(KEY, b"x" * 64)]) == [True]
        assert "/" + NAMESPACE + KEY.replace("/", "_") in s3.objects
        assert plain.lookup([KEY]) == [None]  # another namespace: a miss, never its bytes
        assert spaced.lookup([KEY]) == [64]
    finally:
        plain.close()
        spaced.close()


def test_the_plugin_settings_read_the_namespace():
    from kvceph_connector.settings import settings_from_extra

    extra = {"kvceph.endpoint": "lmcache.s3.kvlab:443", "kvceph.namespace": NAMESPACE}
    assert settings_from_extra(extra).s3.namespace == NAMESPACE
    assert settings_from_extra({"kvceph.endpoint": "b.s3:443"}).s3.namespace == ""
