"""verify.py in LMCache MP mode (deploys/verification/mp.py): the external-connector line, the
server's L1 cleared before the S3 step, per-tier hits from the server's /metrics, against the
real server's recorded /metrics (lab/engine/tests/fixtures/mp/) and the lab's stand-in."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from test_verification_runner import FakeControl, _by_step, _run, lab  # noqa: F401

from deploys.verification import mp, object_names

MP_NAMES = object_names.mp_names  # before the fixture below replaces them
MP_REFUSAL = object_names.mp_refusal
ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "lab/engine/tests/fixtures/mp/metrics-s3.txt"


def _lab_server():
    from kvceph_lab_engine import mp_server

    argv = ["server", "--l1-size-gb", "0.001", "--eviction-policy", "LRU"]
    return mp_server, mp_server.MPServer(mp_server.parser().parse_args(argv), [])


def test_tier_hits_from_the_server_metrics():
    # the recorded real server was idle: no lookup counters yet -> no figures, not zeros
    assert mp.tier_hits(RECORDED.read_text()) is None
    module, state = _lab_server()
    state.l1.put("k", b"x")
    state._lookup([["k"], ["j"]], [1, 1], [256, 256])
    hits = mp.tier_hits(state.metrics())
    assert hits == {"l1": 256.0, "l2": 0.0}
    # the SSH channel joins output lines with '; '
    assert mp.tier_hits("; ".join(state.metrics().splitlines())) == hits
    assert mp.tier_delta(hits, {"l1": 256.0, "l2": 1024.0}) == {"l1": 0.0, "l2": 1024.0}
    assert mp.tier_delta(None, hits) is None


def test_clear_command_posts_lmcache_body(monkeypatch):
    module, state = _lab_server()
    state.l1.put("k", b"x")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), module._http_handler(state))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        monkeypatch.setattr(mp, "CLEAR_URL", url + "/cache/clear")
        monkeypatch.setattr(mp, "METRICS_URL", url + "/metrics")
        out = subprocess.run(
            ["sh", "-c", mp.clear_l1_command()], capture_output=True, text=True, check=True
        ).stdout
        assert mp.cleared(out) and not state.l1.data
        text = subprocess.run(
            ["sh", "-c", mp.metrics_command()], capture_output=True, text=True, check=True
        ).stdout
        assert mp.tier_hits(text) == {"l1": 0.0, "l2": 0.0}
    finally:
        srv.shutdown()
        srv.server_close()


def test_connector_verdict_names_the_host():
    assert mp.connector_verdict("gpu1", True) is None
    assert mp.connector_verdict("gpu1", None) is None  # journal unreadable: said elsewhere
    v = mp.connector_verdict("gpu1", False)
    assert v.failed and v.message.startswith("gpu1: ") and "built-in copy" in v.message


class MPControl(FakeControl):
    """FakeControl plus the host's MP server: its clears and the hit counters it reports."""

    def __init__(self, engines, l1_after_clear=0.0):
        super().__init__(engines)
        self.clears: list[str] = []
        self.scrapes = 0
        self.l1_after_clear = l1_after_clear

    def mp_clear_l1(self, host):
        self.clears.append(host)
        return None

    def mp_metrics(self, host):
        self.scrapes += 1
        # before the S3 step, then after it: L2 served the document's 1024 chunk tokens
        l1, l2 = (0.0, 0.0) if self.scrapes % 2 else (self.l1_after_clear, 1024.0)
        return (
            f"lmcache_mp_lookup_hit_l1_tokens_total {l1}\n"
            f"lmcache_mp_lookup_hit_l2_tokens_total {l2}\n"
        )


def _mp(t):
    return dataclasses.replace(t, mp=True)


@pytest.fixture(autouse=True)
def fake_engine_names(monkeypatch):
    """The fake engines write in-process names: the MP cycle asks for those (mp_names itself
    is checked against the lab engine's keys below)."""

    def names(tokens, *, model, world_size, chunk_size, prefix):
        return object_names.names(
            tokens, model=model, world_size=world_size, chunk_size=chunk_size,
            save_unfull_chunk=False, algorithm="sha256_cbor", seed=67,
        )  # fmt: skip

    monkeypatch.setattr(object_names, "mp_names", names)
    # the fakes answer as "vllm", not the lab engine: as if this Python had blake3
    monkeypatch.setattr(object_names, "mp_refusal", lambda lab_engine: None)


def test_mp_refusal_without_blake3():
    from kvceph_lab_engine import mp_keys

    assert MP_REFUSAL(lab_engine=True) is None
    if mp_keys.ALGORITHM != "blake3":
        assert "pip install blake3" in MP_REFUSAL(lab_engine=False)


def test_mp_names_are_the_lab_engines_objects():
    from kvceph_lab_engine.mp_keys import MPHasher

    tokens = list(range(600))
    folder = "kv/Qwen%2FQwen3-32B@tp2@pp1@-@bfloat16@c256@kv-packed@naive@none@mp-lmcache0.5/"
    got = MP_NAMES(tokens, model="Qwen/Qwen3-32B", world_size=2, chunk_size=256, prefix=folder)
    h = MPHasher(model="Qwen/Qwen3-32B", world_size=2, chunk_size=256)
    want = folder + h.key_string(h.chunk_hashes(tokens)[1], 1).replace("/", "_")
    assert len(got) == 4 and got[3] == want
    assert object_names.stem(got[0]) == got[0]  # no dtype field: an MP name is its own stem


def test_mp_cycle_clears_l1_and_reads_tiers(lab):  # noqa: F811
    bucket, engines, add = lab
    a, b = _mp(add("gpu1")), _mp(add("gpu2"))
    for e in engines.values():
        e.journal.add(f"INFO ... {mp.EXTERNAL_LINE}")
    control = MPControl(engines)
    rep, _ = _run(bucket, engines, [[a, b]], control=control)
    assert not rep.failures, rep.failure_lines()
    warm = _by_step(rep)[("gpu1", "warm")]
    assert warm.figures["mp_tier_hit_tokens"] == {"l1": 0.0, "l2": 1024.0}
    assert control.clears == ["gpu1", "gpu1"]  # before the S3 step and before the fallback


def test_mp_s3_step_served_by_l1_fails(lab):  # noqa: F811
    bucket, engines, add = lab
    a, b = _mp(add("gpu1")), _mp(add("gpu2"))
    for e in engines.values():
        e.journal.add(mp.EXTERNAL_LINE)
    rep, _ = _run(bucket, engines, [[a, b]], control=MPControl(engines, l1_after_clear=1024.0))
    warm = _by_step(rep)[("gpu1", "warm")]
    assert warm.verdict.failed and "measured DRAM, not S3" in warm.verdict.message


def test_mp_builtin_connector_fails_preflight(lab):  # noqa: F811
    bucket, engines, add = lab
    a = _mp(add("gpu1"))
    rep, _ = _run(bucket, engines, [[a]], control=MPControl(engines))
    pre = _by_step(rep)[("gpu1", "preflight")]
    assert pre.verdict.failed and "gpu1: the engine's journal has no" in pre.verdict.message


def test_tier_hits_read_a_real_servers_labelled_series():
    from pathlib import Path

    from deploys.verification import mp

    served = (
        Path(__file__).resolve().parents[1] / "fixtures" / "mp_server" / "metrics-h100-served.txt"
    )
    assert mp.tier_hits(served.read_text()) == {"l1": 0.0, "l2": 0.0}
    two = (
        'lmcache_mp_lookup_hit_l1_tokens_total{model_name="a"} 3.0\n'
        'lmcache_mp_lookup_hit_l1_tokens_total{model_name="b"} 4.0\n'
        "lmcache_mp_lookup_hit_l2_tokens_total 5.0\n"
    )
    assert mp.tier_hits(two) == {"l1": 7.0, "l2": 5.0}
