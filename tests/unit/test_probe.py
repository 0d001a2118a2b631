"""The cache probe: object size from kv_sizing, break-even arithmetic, verdicts, report, command."""

from __future__ import annotations

import json
import math
import re

import pytest

from deploys import settings
from deploys.probe import controller, report
from deploys.probe import verdicts as v
from deploys.remote import s3probe
from deploys.tier import kv_sizing

LAB = {
    "kvceph_rgw_dns_name": "s3.kvlab",
    "kvceph_lab": True,
    "kvceph_s3_endpoint": "http://s3.kvlab:80",
    "kvceph_s3_endpoint_ip": "10.213.7.11",
}
QWEN_TP2 = v.Shape(chunk_size=256, kv_bytes_per_token=131_072, tensor_parallel_size=2)
QWEN_TP1 = v.Shape(chunk_size=256, kv_bytes_per_token=262_144, tensor_parallel_size=1)


def gpu_host(**data):
    """gpu1 with LMCache's stock connector unless ``data`` says otherwise (the probe's stock
    arguments; kvceph's connector, the default, has its own test)."""
    return settings.load({**LAB, "kvceph_lmcache_connector": "lmcache", **data}, "gpu1", ["gpu"])


def test_object_size_is_chunk_times_kv_per_worker_from_kv_sizing():
    me = gpu_host()
    # Qwen3-32B bf16 at TP 2: 131,072 B per token per worker, 256 tokens: 32 MiB per object.
    assert kv_sizing.chunk_bytes(me) == 32 * 1024 * 1024
    assert controller.shape_of(me) == QWEN_TP2
    assert kv_sizing.chunk_bytes(gpu_host(kvceph_kv_dtype="fp8")) == 16 * 1024 * 1024
    assert kv_sizing.chunk_bytes(gpu_host(kvceph_tensor_parallel_size=1)) == 64 * 1024 * 1024


def test_kv_bytes_count_full_chunks_of_all_workers():
    assert QWEN_TP2.chunks(8192) == 32
    assert QWEN_TP2.kv_bytes(8192) == 8192 * 262_144  # both workers
    assert QWEN_TP2.chunks(8300) == 32  # the partial last chunk is never stored


def test_break_even_without_lookups_is_kv_per_token_times_prefill_rate():
    # The README's figure: Qwen3-32B at 5,000 tokens/s needs 1.31 GB/s, at every length.
    for tokens in v.PROMPT_TOKENS:
        assert v.break_even(QWEN_TP2, tokens, 5000, 0.0) == pytest.approx(1.31072)
        assert v.break_even(QWEN_TP1, tokens, 5000, 0.0) == pytest.approx(1.31072)


def test_lookup_latency_raises_break_even_and_can_make_it_unreachable():
    # 32 sequential HEADs of 10 ms take 0.32 s of a 1.64 s prefill (8k at 5,000 tok/s).
    be = v.break_even(QWEN_TP2, 8192, 5000, 0.010)
    assert be == pytest.approx(8192 * 262_144 / (8192 / 5000 - 0.32) / 1e9)
    assert be > 1.31072
    # HEADs alone outlast the prefill: no bandwidth is enough.
    assert v.break_even(QWEN_TP2, 8192, 5000, 0.06) == math.inf
    assert v.verdict(100.0, math.inf) == v.SLOWER


@pytest.mark.parametrize(
    ("measured", "expected"),
    [
        (1.2, v.PAYS),
        (5.0, v.PAYS),
        (1.19, v.MARGINAL),
        (1.0, v.MARGINAL),
        (1 / 1.2, v.MARGINAL),
        (0.83, v.SLOWER),
        (0.1, v.SLOWER),
    ],
)
def test_verdict_bands_around_break_even(measured, expected):
    assert v.verdict(measured, 1.0) == expected


def test_h200_recipe_figures_give_the_verdict_that_was_measured():
    # The H200 run: ~1.2 GB/s from one radosgw, 5,000 tokens/s at TP 1: the cache made TTFT
    # worse or no better; 0.9 GB/s (LMCache's own load) was clearly slower.
    measured = v.Measured(up_gb_per_s=1.0, down_gb_per_s=1.2, head_seconds=0.002)
    assert {p.verdict for p in v.judge(QWEN_TP1, measured, 5000)} == {v.MARGINAL}
    slow = v.Measured(up_gb_per_s=1.0, down_gb_per_s=0.9, head_seconds=0.002)
    judged = v.judge(QWEN_TP1, slow, 5000)
    assert [p.verdict for p in judged] == [v.SLOWER] * 3
    assert all(p.load_seconds > p.prefill_seconds for p in judged)
    assert v.overall(judged) == (
        "8k slower than recompute, 32k slower than recompute, 128k slower than recompute"
    )


RAW = {
    "bytes_per_round": 64 * 32768,
    "objects": 128,
    "deleted": 128,
    "put_seconds": [0.5, 0.4, 0.6],
    "get_seconds": [0.2, 0.1, 0.3],
    "head_seconds_median": 0.001,
    "up_gb_per_s": [0.1, 0.2, 0.3],
    "down_gb_per_s": [0.5, 1.0, 2.0],
}
VERIFY = {
    "run_id": "r1",
    "steps": [
        {"host": "gpu1", "step": "cold", "ttft": 3.2768, "figures": {"prompt_tokens": 16384}},
        {"host": "gpu1", "step": "warm", "ttft": 1.6, "figures": {"load_bytes_per_s": 1.3e6}},
        {"host": "gaudi1", "step": "cold", "ttft": 8.0, "figures": {"prompt_tokens": 16384}},
    ],
}


def test_prefill_rate_and_load_come_from_the_hosts_cache_group_in_the_verify_report():
    figures = report.verify_figures(VERIFY, ("gpu1", "gpu2"))
    assert figures["prefill_tokens_per_s"] == pytest.approx(5000)
    assert figures["load_gb_per_s"] == pytest.approx(0.0013)
    assert report.verify_figures(VERIFY, ("other",))["prefill_tokens_per_s"] is None
    assert report.verify_figures(None, ("gpu1",))["load_gb_per_s"] is None


def test_host_result_uses_medians_and_falls_back_to_the_setting():
    measured = report.verify_figures(VERIFY, ("gpu2", "gpu1"))
    r = report.host_result("gpu2", QWEN_TP2, RAW, 2000.0, measured)
    assert (r["up_gb_per_s"], r["down_gb_per_s"]) == (0.2, 1.0)
    assert r["down_gb_per_s_min_max"] == [0.5, 2.0]
    assert r["prefill_tokens_per_s"] == pytest.approx(5000)
    assert "verify.py run r1" in r["prefill_source"]
    assert r["verify_load_ratio"] == pytest.approx(0.0013)
    unmeasured = report.host_result("x", QWEN_TP2, RAW, 2000.0, report.verify_figures(None, ()))
    assert unmeasured["prefill_source"] == "kvceph_prefill_tokens_per_s"
    assert unmeasured["verify_load_ratio"] is None
    # 2,000 tok/s needs 0.52 GB/s: 1 GB/s pays at every length (HEADs of 1 ms are small).
    assert unmeasured["verdict"] == "8k pays, 32k pays, 128k pays"
    assert unmeasured["engine_verdict"] is None
    # verify loaded at 1.3 MB/s: at the engine's rate the cache is slower than recompute.
    assert (
        r["engine_verdict"] == "8k slower than recompute, 32k slower than recompute, "
        "128k slower than recompute"
    )
    text = report.table([r, unmeasured, {"host": "gpu3", "error": "connection refused"}])
    assert "ERROR: connection refused" in text and "verify/probe" in text
    assert "; 8k slower than recompute" in text


def test_deploy_line_is_the_last_verdict_or_says_how_to_get_one(tmp_path):
    assert "run probe.py" in report.last_verdict(tmp_path, "gpu1")
    r = report.host_result("gpu1", QWEN_TP2, RAW, 2000.0, report.verify_figures(None, ()))
    report.write({"run_id": "p1", "hosts": [r, {"host": "gpu2", "error": "boom"}]}, tmp_path)
    assert json.loads((tmp_path / "probe-p1.json").read_text())["run_id"] == "p1"
    assert report.last_verdict(tmp_path, "gpu1") == (
        "last cache probe (p1): gpu1 loads 1.000 GB/s from S3: 8k pays, 32k pays, 128k pays"
    )
    assert "failed on gpu2: boom" in report.last_verdict(tmp_path, "gpu2")
    assert "no cache probe result for gpu9" in report.last_verdict(tmp_path, "gpu9")


def test_remote_command_takes_the_engines_path_and_no_secret():
    me = gpu_host(kvceph_probe_tokens=8192, kvceph_probe_rounds=2)
    cmd = controller.probe_command(me, "nonce1")
    assert cmd.startswith("timeout 600 runuser -u vllm -- env HOME=/var/lib/vllm AWS_PROFILE=")
    assert re.search(r"/opt/kvceph/venv-[0-9a-f]{12}/bin/python -c ", cmd)
    tail = cmd.rsplit("if __name__", 1)[1]
    for arg in (
        "--endpoint lmcache.s3.kvlab:80",
        "--region default",
        f"--chunk-bytes {32 * 1024 * 1024}",
        "--chunks 32",
        "--workers 2",
        "--io-threads 64",
        "--rounds 2",
        "--nonce nonce1",
        "--disable-tls",
    ):
        assert arg in tail
    # kvceph's default extra_config turns HTTP/2 off, as it is in the host's lmcache.yaml
    assert "--prefer-http2" not in tail
    assert "aws_secret_access_key" not in tail and "KVCEPH_S3" not in cmd
    tls = gpu_host(kvceph_lmcache_extra_config={"s3_prefer_http2": True, "s3_num_io_threads": 8})
    tail = controller.probe_command(tls, "n").rsplit("if __name__", 1)[1]
    assert "--prefer-http2" in tail and "--io-threads 8" in tail


def test_kvceph_connector_probes_its_endpoint_and_connections():
    """With kvceph's connector the probe reads the same kvceph.* keys the plugin does (no
    remote_url, no stock keys in that lmcache.yaml)."""
    me = gpu_host(
        kvceph_lmcache_connector="kvceph",
        kvceph_connector_connections=24,
        kvceph_s3_endpoint="https://s3.kvlab:443",
    )
    tail = controller.probe_command(me, "n").rsplit("if __name__", 1)[1]
    assert "--endpoint lmcache.s3.kvlab:443" in tail and "--io-threads 24" in tail
    assert "--disable-tls" not in tail and "--prefer-http2" not in tail
    assert "--connector kvceph --connections 24 --timeout-s 5.0" in tail
    args = s3probe.parse(controller.probe_args(me, "n"))
    assert (args.connector, args.connections, args.timeout_s) == ("kvceph", 24, 5.0)


def test_remote_output_is_the_json_line_among_the_others():
    out = "warning: x; " + json.dumps(RAW)
    assert controller.parse_output(out)["objects"] == 128
    with pytest.raises(ValueError, match="s3probe: HTTP 403"):
        controller.parse_output("s3probe: HTTP 403")


def test_remote_stream_reads_and_seeks_like_lmcaches():
    stream = s3probe.MemoryViewStream(b"abcdef")
    assert bytes(stream.read(4)) == b"abcd" and stream.tell() == 4
    assert bytes(stream.read()) == b"ef"
    stream.seek(-2, 2)
    assert bytes(stream.read(10)) == b"ef" and len(stream) == 6
    args = s3probe.parse(["--endpoint", "b.s3:80", "--region", "r", "--chunk-bytes", "8"]
                         + ["--chunks", "2", "--workers", "1", "--nonce", "n"])  # fmt: skip
    assert (args.io_threads, args.rounds, args.disable_tls) == (64, 3, False)


def test_probe_through_kvcephs_connector_core(monkeypatch, capsys):
    # The same objects through kvceph_connector.s3core (--connector kvceph), against the
    # connector's loopback S3: every object written, found, read back exact and deleted.
    pytest.importorskip("kvceph_connector.s3core")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "connector" / "tests"))
    from fake_s3 import FakeS3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "KVTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kvtest-secret")
    server = FakeS3().start()
    try:
        s3probe.main(["--endpoint", server.endpoint, "--region", "r", "--chunk-bytes", "65536"]
                     + ["--chunks", "4", "--workers", "2", "--nonce", "n", "--rounds", "1"]
                     + ["--disable-tls", "--connector", "kvceph"])  # fmt: skip
    finally:
        server.stop()
    out = json.loads(capsys.readouterr().out)
    assert (out["connector"], out["objects"], out["deleted"]) == ("kvceph", 8, 8)
    assert server.objects == {}
    assert server.count("HEAD") == 8 and server.count("GET") == 8
