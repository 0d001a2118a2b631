"""Startup refusals (as vLLM + LMCache refuse) and the HTTP surface, engine as a subprocess."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from conftest import ENGINE_PYTHON, KV_OK, free_port, http, metric

BASE = ["--max-model-len", "4096", "--gpu-memory-utilization", "0.55"]


def run_cli(args, env, timeout=20):
    port = free_port()
    cmd = [ENGINE_PYTHON, "-m", "kvceph_lab_engine", *args]
    if args and args[0] == "serve":
        cmd += ["--host", "127.0.0.1", "--port", str(port)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def write_cfg(tmp_path, text: str) -> str:
    p = tmp_path / "lmcache.yaml"
    p.write_text(text)
    return str(p)


S3_CFG = """chunk_size: 16
local_cpu: false
remote_url: "s3://lmcache.s3.kvlab:{port}"
save_unfull_chunk: false
pre_caching_hash_algorithm: sha256_cbor
extra_config:
  s3_region: "default"
  disable_tls: true
"""


def test_version():
    r = subprocess.run([ENGINE_PYTHON, "-m", "kvceph_lab_engine", "--version"],
                       capture_output=True, text=True, check=True)  # fmt: skip
    assert "not vLLM" in r.stdout and "0.33.0" in r.stdout


@pytest.mark.parametrize(
    ("kv", "version", "message"),
    [
        ('{"kv_connector":"LMCacheConnector","kv_role":"kv_both"}', "0.33.0",
         "ValueError: Unsupported connector type: LMCacheConnector"),
        ('{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both","kv_parallel_size":"16"}',
         "0.33.0", "Unexpected keyword argument"),
        ('{"kv_connector":"LMCacheConnectorV1"}', "0.26.0", "kv_role"),
    ],
)  # fmt: skip
def test_kv_transfer_refusals(tmp_path, engine_env, kv, version, message):
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(tmp_path, "chunk_size: 16\n")
    r = run_cli(["serve", "m", *BASE, "--vllm-version", version, "--kv-transfer-config", kv],
                engine_env)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert message in r.stderr


def test_missing_config_file_refused(engine_env):
    engine_env["LMCACHE_CONFIG_FILE"] = "/nonexistent/lmcache.yaml"
    r = run_cli(["serve", "m", *BASE, "--kv-transfer-config", KV_OK], engine_env)
    assert r.returncode == 1 and "/nonexistent/lmcache.yaml" in r.stderr


def test_config_lmcache_rejects_is_refused(tmp_path, engine_env):
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(tmp_path, "chunk_size: [1, 2]\n")
    r = run_cli(["serve", "m", *BASE, "--kv-transfer-config", KV_OK], engine_env)
    assert r.returncode == 1 and "LMCache rejected its config" in r.stderr


def test_s3_without_region_is_assertion_error(tmp_path, engine_env):
    cfg = S3_CFG.format(port=80).replace('  s3_region: "default"\n', "")
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(tmp_path, cfg)
    r = run_cli(["serve", "m", *BASE, "--kv-transfer-config", KV_OK], engine_env)
    assert r.returncode == 1 and "AssertionError: s3_region is required" in r.stderr


def test_unknown_flag_refused_like_vllm(engine_env):
    r = run_cli(["serve", "m", "--rope-scaling", "{}"], engine_env)
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr


def test_bad_gpu_memory_utilization(engine_env):
    r = run_cli(["serve", "m", "--gpu-memory-utilization", "1.5"], engine_env)
    assert r.returncode == 1 and "GPU memory utilization" in r.stderr


def test_unknown_key_logged_and_env_override(tmp_path, engine_env, start_engine):
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(
        tmp_path, "chunk_size: 256\nlocal_cpu: true\nmax_local_cpu_size: 1\nbogus_key: 1\n"
    )
    engine_env["LMCACHE_CHUNK_SIZE"] = "16"
    e = start_engine([*BASE, "--kv-transfer-config", KV_OK], engine_env)
    assert "Unknown configuration key: bogus_key" in e.logs()
    assert "chunk_size=16" in e.logs()


def test_http_surface_and_metrics_local_cpu_tier(tmp_path, engine_env, start_engine):
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(
        tmp_path, "chunk_size: 16\nlocal_cpu: true\nmax_local_cpu_size: 1\n"
        "pre_caching_hash_algorithm: sha256_cbor\n"
    )  # fmt: skip
    engine_env["KVCEPH_DIGEST"] = "abc123"
    e = start_engine(
        [*BASE, "--kv-transfer-config", KV_OK, "--no-enable-prefix-caching"], engine_env
    )
    assert http("GET", e.url + "/health") == (200, "")
    models = json.loads(http("GET", e.url + "/v1/models")[1])
    assert models["data"][0]["id"] == "Qwen/Qwen3-32B"
    assert "not vLLM" in json.dumps(models, ensure_ascii=False)
    prompt = "hi " * 40
    r1 = e.complete(prompt)
    assert r1["choices"][0]["text"] and r1["usage"]["prompt_tokens"] == 40
    # second time: LMCache's CPU tier has the two full chunks (32 tokens)
    e.complete(prompt)
    m = e.metrics()
    lab = {"model_name": "Qwen/Qwen3-32B", "engine": "0"}
    src = "vllm:prompt_tokens_by_source_total"
    assert metric(m, src, source="external_kv_transfer", **lab) == 32
    assert metric(m, src, source="local_compute", **lab) == 40 + 8
    assert metric(m, src, source="local_cache_hit", **lab) == 0
    assert metric(m, "vllm:external_prefix_cache_queries_total", **lab) == 80
    assert metric(m, "vllm:external_prefix_cache_hits_total", **lab) == 32
    assert metric(m, "vllm:prompt_tokens_total", **lab) == 80
    assert metric(m, "vllm:time_to_first_token_seconds_count", **lab) == 2
    assert metric(m, "vllm:time_to_first_token_seconds_bucket", le="+Inf", **lab) == 2
    assert 'kvceph_lab_engine_info{digest="abc123"' in m
    assert "lmcache: request=cmpl-" in e.logs() and "hit_tokens=32" in e.logs()


def test_chat_stream_and_errors(tmp_path, engine_env, start_engine):
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(tmp_path, "chunk_size: 16\nlocal_cpu: false\n")
    e = start_engine([*BASE, "--kv-transfer-config", KV_OK, "--prefill-ms-per-token", "2"],
                     engine_env)  # fmt: skip
    body = {"model": e.model, "messages": [{"role": "user", "content": "hi " * 100}],
            "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    import urllib.request

    req = urllib.request.Request(e.url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
    t0 = time.monotonic()
    first_content = None
    events = []
    with urllib.request.urlopen(req, timeout=30) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ")
            events.append(line[6:])
            if first_content is None and line != "data: [DONE]":
                ch = json.loads(line[6:])["choices"]
                if ch and ch[0]["delta"].get("content"):
                    first_content = time.monotonic() - t0
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"] == [] and last["usage"]["prompt_tokens"] == 100
    assert first_content is not None and first_content >= 0.2  # 100 tokens x 2 ms prefill
    # non-streaming chat has choices + usage
    body.update(stream=False, max_tokens=8)
    status, text = http("POST", e.url + "/v1/chat/completions", body)
    assert status == 200 and json.loads(text)["choices"][0]["message"]["content"]
    # errors shaped like vLLM's
    status, text = http("POST", e.url + "/v1/completions", {"model": "x", "prompt": "a"})
    assert status == 404 and json.loads(text)["error"]["code"] == 404
    status, text = http("POST", e.url + "/v1/completions",
                        {"model": e.model, "prompt": "a " * 4095, "max_tokens": 16})  # fmt: skip
    assert status == 400 and "maximum context length is 4096" in text


def test_unreachable_s3_keeps_serving_and_disables(tmp_path, engine_env, start_engine):
    closed = free_port()
    cfg = S3_CFG.format(port=closed).replace("lmcache.s3.kvlab", "lmcache.localhost")
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(tmp_path, cfg)
    engine_env["AWS_ACCESS_KEY_ID"] = "k"  # awscrt default chain: environment first
    engine_env["AWS_SECRET_ACCESS_KEY"] = "s"
    e = start_engine([*BASE, "--kv-transfer-config", KV_OK], engine_env)
    for word in ("a", "b"):
        r = e.complete((word + " ") * 64)
        assert r["usage"]["prompt_tokens"] == 64
    deadline = time.monotonic() + 60
    while "S3 connection disabled" not in e.logs() and time.monotonic() < deadline:
        e.complete("c " * 64)
    assert "S3 connection disabled" in e.logs()
    assert http("GET", e.url + "/health")[0] == 200


def test_no_credentials_keeps_serving_without_disabling(tmp_path, engine_env, start_engine):
    # signing fails before any connection: LMCache logs upload errors, never disables S3
    engine_env["LMCACHE_CONFIG_FILE"] = write_cfg(tmp_path, S3_CFG.format(port=free_port()))
    e = start_engine([*BASE, "--kv-transfer-config", KV_OK], engine_env)
    e.complete("a " * 64)
    assert "AWS_AUTH_SIGNING_NO_CREDENTIALS" in e.logs()
    assert "S3 connection disabled" not in e.logs()


# --- Devices: what CUDA_VISIBLE_DEVICES / HABANA_VISIBLE_MODULES leave, and memory shares ----


@pytest.mark.parametrize("variable", ["CUDA_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES"])
def test_more_workers_than_visible_devices_is_refused(engine_env, variable):
    engine_env[variable] = "3"
    r = run_cli(["serve", "m", *BASE, "-tp", "2"], engine_env)
    assert r.returncode == 1
    assert "please set tensor_parallel_size (2) to less than max local gpu count (1)" in r.stderr


def test_two_engines_on_one_device_fail_like_vllm(tmp_path, engine_env, start_engine):
    engine_env["KVCEPH_LAB_DEVICE_LEDGER"] = str(tmp_path / "devices")
    a = dict(engine_env, CUDA_VISIBLE_DEVICES="0,1")
    start_engine([*BASE, "-tp", "2"], a)
    # Other devices: fine. The same device (0.55 + 0.55 of its memory): refused at startup.
    start_engine([*BASE, "-tp", "2"], dict(engine_env, CUDA_VISIBLE_DEVICES="2,3"))
    r = run_cli(["serve", "m", *BASE], dict(engine_env, CUDA_VISIBLE_DEVICES="1"))
    assert r.returncode == 1
    assert "Free memory on device cuda:1" in r.stderr
    assert "less than desired GPU memory utilization (0.55" in r.stderr
    # No variable: every device is visible and TP 2 takes the first two (0 and 1: held).
    r = run_cli(["serve", "m", *BASE, "-tp", "2"], engine_env)
    assert "Free memory on device cuda:0" in r.stderr
