"""The lab's LMCache MP server (mp_server.py) and the engine in MP mode (mp_client.py), against
the real server's recorded outputs (tests/fixtures/mp/) and, end to end, kvceph's real
KvcephMPConnector as L2 on connector/tests/fake_s3.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ENGINE_PYTHON, free_port, http

from kvceph_lab_engine import mp_server
from kvceph_lab_engine.mp_client import EXTERNAL_LINE
from kvceph_lab_engine.mp_keys import MPHasher, kv_rank

FIXTURES = Path(__file__).parent / "fixtures" / "mp"
# kvceph's rendered flags (deploys/render.py mp_server_exec_start), the adapter replaced per test
RENDERED = [
    "server", "--host", "127.0.0.1", "--port", "5555", "--http-host", "127.0.0.1",
    "--http-port", "8090", "--chunk-size", "256", "--hash-algorithm", "blake3",
    "--l1-size-gb", "0.001", "--eviction-policy", "LRU", "--max-gpu-workers", "2",
    "--worker-reap-timeout-seconds", "60", "--worker-registration-grace-seconds", "300",
]  # fmt: skip


def shape(obj):
    """The keys of a JSON value, recursively (lists by their first item)."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(obj[0])] if obj else []
    name = type(obj).__name__
    return "float" if name == "int" else name


def test_rendered_flags_parse_and_unknown_refused(capsys):
    args = mp_server.parser().parse_args([*RENDERED, "--l2-adapter", "{}"])
    mp_server.check(args)
    assert (args.port, args.http_port, args.l1_size_gb) == (5555, 8090, 0.001)
    with pytest.raises(SystemExit) as exc:
        mp_server.parser().parse_args([*RENDERED, "--l1-mlock"])  # 0.5.7rc2's, not 0.5.6's
    assert exc.value.code == 2
    assert "unrecognized arguments: --l1-mlock" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("drop", "why"),
    [
        ("--l1-size-gb", "Legacy L1 configuration requires --l1-size-gb and --eviction-policy"),
        ("--eviction-policy", "Legacy L1 configuration requires"),
    ],
)
def test_required_l1_flags(drop, why):
    argv = list(RENDERED)
    i = argv.index(drop)
    del argv[i : i + 2]
    with pytest.raises(mp_server.ConfigError, match=why):
        mp_server.check(mp_server.parser().parse_args(argv))


def test_reap_timeout_floor():
    argv = [*RENDERED[:-4], "--worker-reap-timeout-seconds", "10"]
    with pytest.raises(mp_server.ConfigError, match="0 or >= 30"):
        mp_server.check(mp_server.parser().parse_args(argv))


def _state(l2=()):
    args = mp_server.parser().parse_args(RENDERED)
    return mp_server.MPServer(args, list(l2))


def test_status_has_the_recorded_shape():
    stub = type("Stub", (), {"type_name": "KvcephMPConnector"})()
    got = _state([stub]).status()
    want = json.loads((FIXTURES / "status-kvceph.json").read_text())
    assert shape(got) == shape(want)
    assert got["hash_algorithm"] == "blake3" and got["chunk_size"] == 256
    assert got["storage_manager"]["l2_adapters"] == want["storage_manager"]["l2_adapters"]


def test_metrics_names_are_the_recorded_ones():
    types = r"^# TYPE (lmcache_mp_\w+) (\w+)"
    recorded = set(re.findall(types, (FIXTURES / "metrics-s3.txt").read_text(), re.M))
    mine = set(re.findall(types, _state().metrics(), re.M))
    gauges = {m for m in mine if m[1] == "gauge"}
    assert gauges <= recorded, gauges - recorded
    # counters: LMCache's OTel names ('.' -> '_', + _total), not in the idle recording
    assert {n for n, t in mine if t == "counter"} == set(mp_server.COUNTERS)


def test_l1_lru_and_clear():
    l1 = mp_server.L1(100)
    for k in "abcd":
        l1.put(k, b"x" * 20)
    l1.get("a")  # a is now the most recently used
    l1.put("e", b"x" * 20)  # 100 > 80: evict down to 60
    assert set(l1.data) == {"a", "d", "e"}
    assert l1.clear() == 3 and l1.used == 0


def test_mp_keys_shape():
    h = MPHasher(model="Qwen/Qwen3-32B", world_size=2, chunk_size=4)
    hashes = h.chunk_hashes(list(range(9)))
    assert len(hashes) == 2  # the partial chunk has no key
    key = h.key_string(hashes[1], 1)
    assert key.startswith("Qwen/Qwen3-32B@02010201@0@") and len(key.rsplit("@", 1)[1]) == 64
    assert kv_rank(2, 0) == 0x02000200


# -- end to end: server + engine processes, kvceph's plugin as L2 on the fake S3 -------------
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "connector" / "tests"))
PREFIX = "kvceph-mp.vllm0.34.bfloat16@"


class Server:
    """``python -m kvceph_lab_engine.mp_server server ...`` on free ports."""

    def __init__(self, s3_endpoint: str, env: dict, log: Path, port=None, http_port=None):
        self.port, self.http_port = port or free_port(), http_port or free_port()
        adapter = {
            "type": "native_plugin", "shared": True,
            "module_path": "kvceph_connector.lmcache_mp", "class_name": "KvcephMPConnector",
            "adapter_params": {"endpoint": s3_endpoint, "tls": False, "timeout_s": 1.0,
                               "prefix": PREFIX},
        }  # fmt: skip
        argv = list(RENDERED)
        argv[argv.index("--port") + 1] = str(self.port)
        argv[argv.index("--http-port") + 1] = str(self.http_port)
        argv[argv.index("--chunk-size") + 1] = "16"
        self.log = log
        module = "kvceph_lab_engine.mp_server"
        cmd = [ENGINE_PYTHON, "-m", module, *argv, "--l2-adapter", json.dumps(adapter)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=open(log, "a"), stderr=subprocess.STDOUT)  # noqa: SIM115
        self.url = f"http://127.0.0.1:{self.http_port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log.read_text()
            try:
                if http("GET", self.url + "/healthcheck", timeout=1)[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server did not become healthy")

    def counter(self, name: str) -> float:
        text = http("GET", self.url + "/metrics")[1]
        return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def fake_s3():
    pytest.importorskip("kvceph_connector.lmcache_mp")
    from fake_s3 import FakeS3

    s3 = FakeS3().start()
    yield s3
    s3.stop()


def _kv(port: int, policy: str = "recompute") -> str:
    return json.dumps({
        "kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
        "kv_load_failure_policy": policy,
        "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": port,
                                      "lmcache.mp.heartbeat_interval": 0.5},
    })  # fmt: skip


def test_mp_cold_l1_s3_and_server_death(fake_s3, engine_env, start_engine, tmp_path):
    env = {**engine_env, "AWS_ACCESS_KEY_ID": "KVTEST", "AWS_SECRET_ACCESS_KEY": "kvtest-secret"}
    server = Server(fake_s3.endpoint, env, tmp_path / "server.log")
    try:
        args = ["--kv-transfer-config", _kv(server.port), "--vllm-version", "0.34.0",
                "--no-enable-extensible-kv-cache", "--tensor-parallel-size", "2"]  # fmt: skip
        a = start_engine(args, env)
        prompt = " ".join(f"w{i}" for i in range(64))  # 4 chunks of 16
        cold = a.complete(prompt, max_tokens=8)["choices"][0]["text"]
        assert EXTERNAL_LINE in a.logs()
        names = sorted(fake_s3.objects)
        assert len(names) == 8 and all(PREFIX in n for n in names), names
        # a second engine of the host: served from the server's L1, no GET
        b = start_engine(args, env)
        gets = sum(1 for m, _ in fake_s3.requests if m == "GET")
        assert b.complete(prompt, max_tokens=8)["choices"][0]["text"] == cold
        assert server.counter("lmcache_mp_lookup_hit_l1_tokens_total") == 64
        assert sum(1 for m, _ in fake_s3.requests if m == "GET") == gets
        # L1 cleared: the third engine loads from S3 (L2), same answer
        assert http("POST", server.url + "/cache/clear", {"tier": "l1", "force": False})[0] == 200
        c = start_engine(args, env)
        assert c.complete(prompt, max_tokens=8)["choices"][0]["text"] == cold
        assert server.counter("lmcache_mp_lookup_hit_l2_tokens_total") == 64
        assert sum(1 for m, _ in fake_s3.requests if m == "GET") == gets + 8
        # the server dies under c: requests still answer (recomputed), degraded mode
        server.kill()
        time.sleep(1.5)
        other = " ".join(f"v{i}" for i in range(64))
        c.complete(other, max_tokens=8)
        assert "entering degraded mode" in c.logs()
        # back without an operator (systemd restarts it): c registers again and hits
        ports = server.port, server.http_port
        server = Server(fake_s3.endpoint, env, tmp_path / "server.log", *ports)
        deadline = time.monotonic() + 10
        while "resuming normal operation" not in c.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "triggering recovery callback" in c.logs()
        assert c.complete(prompt + " tail", max_tokens=8)
        assert server.counter("lmcache_mp_lookup_hit_l2_tokens_total") == 64
    finally:
        server.kill()
