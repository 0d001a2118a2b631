"""What the S3 core lets go of, and where its crc32c check runs (tests/fake_s3.py on loopback).

Before issue 50 every request kept awscrt's request object, whose native callbacks point back
at the request: a cycle Python's collector cannot see, and every client the refresh replaced
stayed alive with its threads (+41 threads, +127 fds per refresh at 16 connections).
bench/soak.py runs the same at length and prints the figures.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
import types
import weakref

import pytest
from fake_s3 import FakeS3

from kvceph_connector import s3core
from kvceph_connector.s3core import REFUSED_LINE, S3Config, S3Core
from kvceph_connector.settings import PluginSettings, settings_from_extra

SECRET = "kvtest-secret-do-not-print"


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "KVTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)


@pytest.fixture()
def s3():
    server = FakeS3().start()
    yield server
    server.stop()


def threads() -> int:
    """This process's threads, awscrt's native ones included."""
    return len(os.listdir("/proc/self/task"))


def settle(done, timeout: float = 10.0) -> bool:
    """Poll done() until it is true or timeout seconds passed; its last answer."""
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        gc.collect()
        time.sleep(0.05)
    return done()


def test_a_finished_request_and_its_crt_request_are_freed(s3, monkeypatch):
    core = S3Core(S3Config(endpoint=s3.endpoint, tls=False, connections=4, timeout_s=1.0))
    sent = []
    real = core._s3

    def recording(**kw):
        req = real.S3Request(**kw)
        sent.append(weakref.ref(req))
        return req

    core._s3 = types.SimpleNamespace(**{**vars(real), "S3Request": recording})
    data = os.urandom(1 << 20)
    n = len(data)
    s3.faults[s3.name("bad")] = "corrupt"
    ops = []
    try:
        for send in (
            lambda: core.put_many_future([("a", data), ("bad", data)]),
            lambda: core.lookup_future(["a", "missing"]),
            lambda: core.get_many_into_future([(k, bytearray(n), n) for k in ("a", "bad")]),
            lambda: core.get_many_into_future([("missing", bytearray(8), 8)]),
            lambda: core._batch([s3core._Op("DELETE", "a")], "delete"),
        ):
            batch = send()
            batch.result(10)
            ops += [weakref.ref(op) for op in batch.kvceph_ops]
            del batch
        assert len(sent) == 8
        # No collector run needed for the CRT side: it lets go as the request ends.
        assert settle(lambda: all(r() is None for r in sent), 5), "awscrt requests kept"
        assert settle(lambda: all(r() is None for r in ops), 5), "finished requests kept"
    finally:
        core.close()


def test_refreshes_with_traffic_leave_no_threads_behind(s3):
    before = threads()
    core = S3Core(S3Config(endpoint=s3.endpoint, tls=False, connections=4, refresh_s=0.2))
    data = os.urandom(64 << 10)
    keys = [f"k{i}" for i in range(8)]
    assert all(core.put_many([(k, data) for k in keys]))
    baseline = threads()
    for _ in range(8):  # a refresh every round, each client serving traffic
        assert all(core.get_many_into([(k, bytearray(len(data)), len(data)) for k in keys]))
        time.sleep(0.25)
    # Without the release: 8 clients x (4 event loops + resolver + connections' server threads).
    assert settle(lambda: core.clients_alive() == 1), core.clients_alive()
    assert settle(lambda: threads() <= baseline + 3), (baseline, threads())
    core.close()
    assert settle(lambda: core.clients_alive() == 0)
    assert settle(lambda: threads() <= before + 3), (before, threads())


def test_the_crc32c_check_runs_on_the_cores_own_threads(s3, monkeypatch):
    names = []
    real = s3core.crc32c
    monkeypatch.setattr(
        s3core, "crc32c", lambda d: names.append(threading.current_thread().name) or real(d)
    )
    core = S3Core(S3Config(endpoint=s3.endpoint, tls=False, connections=4))
    try:
        data = os.urandom(3 << 20)
        assert core.put_many([(f"k{i}", data) for i in range(4)])
        names.clear()  # a put's crc32c is computed where it is sent
        items = [(f"k{i}", bytearray(len(data)), len(data)) for i in range(4)]
        assert all(core.get_many_into(items))
        assert len(names) == 4
        assert all(n.startswith("kvceph-s3-crc32c") for n in names), names
        assert (core.crc32c_checked, core.crc32c_refused) == (4, 0)
    finally:
        core.close()


def test_refused_bodies_are_counted_and_logged_at_most_once_a_period(s3, monkeypatch, caplog):
    monkeypatch.setattr(s3core, "REPORT_EVERY_S", 0.5)
    caplog.set_level(logging.DEBUG, logger="kvceph_connector")
    core = S3Core(S3Config(endpoint=s3.endpoint, tls=False, connections=4))
    try:
        data = os.urandom(1 << 20)
        assert core.put("k", data)
        s3.faults[s3.name("k")] = "corrupt"
        for _ in range(3):
            assert core.get_many_into([("k", bytearray(len(data)), len(data))]) == [False]
        assert (core.crc32c_checked, core.crc32c_refused) == (3, 3)

        def counts():
            return [
                r.getMessage().split(" GET bodies")[0]
                for r in caplog.records
                if r.levelno >= logging.WARNING
            ]

        assert counts() == [f"{REFUSED_LINE} 1"]  # the first at once, then at most one a period
        # The watchdog logs the count that changed within the period, without a new refusal.
        assert settle(lambda: counts() == [f"{REFUSED_LINE} 1", f"{REFUSED_LINE} 3"], 3)
    finally:
        core.close()


def test_no_repr_str_or_error_holds_the_secret_key(s3, caplog):
    caplog.set_level(logging.DEBUG)
    config = S3Config(endpoint="lmcache.s3.kvlab:443", access_key_id="AK", secret_access_key=SECRET)
    settings = PluginSettings(config, 0, False)
    for text in (repr(config), str(config), repr(settings), str(settings)):
        assert SECRET not in text and "AK" in text
    for bad in (
        dict(endpoint="https://x"),
        dict(endpoint="x.y", connections=0),
        dict(endpoint="x.y", timeout_s=0),
        dict(endpoint="x.y", receive_dir="/nonexistent/kvceph"),
    ):
        with pytest.raises(ValueError) as info:
            S3Config(**bad, access_key_id="AK", secret_access_key=SECRET)
        assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    with pytest.raises(ValueError) as info:
        S3Config(endpoint="x.y", access_key_id=None, secret_access_key=SECRET)
    assert SECRET not in str(info.value)
    for extra in ({"kvceph.endpoint": "x.y", "kvceph.tls": SECRET}, {f"kvceph.{SECRET}": 1}):
        with pytest.raises(ValueError) as info:
            settings_from_extra(extra)
        assert str(info.value)  # (the plugin never reads a key from extra_config)
    # A core with static keys logs, refuses and misses without it.
    core = S3Core(
        S3Config(endpoint=s3.endpoint, tls=False, access_key_id="AK", secret_access_key=SECRET)
    )
    try:
        assert core.get_many_into([("missing", bytearray(8), 8)]) == [False]
    finally:
        core.close()
    assert all(SECRET not in r.getMessage() for r in caplog.records)
