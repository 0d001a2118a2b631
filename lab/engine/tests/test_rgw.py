"""Against a REAL Ceph RGW (virtual-hosted buckets): cold -> warm -> cold, object names and
contents, TP=2, seeds, bad credentials. Skips unless an RGW answers.

    KVCEPH_ENGINE_RGW=127.0.0.1:7490     RGW address (default; from ceph-single-node.sh)
    KVCEPH_ENGINE_RGW_DNS=s3.local       its rgw_dns_name
    KVCEPH_ENGINE_S3_KEYS=testaccess:testsecret
<bucket>.<dns name> is mapped to the RGW's IP for the engine only: it runs in a private mount
namespace (`unshare -m`, root) with its own /etc/hosts bind-mounted; nothing global changes.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
import uuid

import pytest
from conftest import KV_OK, metric

from kvceph_lab_engine.engine import object_payload
from kvceph_lab_engine.hashing import ChunkHasher, object_name
from kvceph_lab_engine.tokenizer import tokenize

RGW = os.environ.get("KVCEPH_ENGINE_RGW", "127.0.0.1:7490")
DNS = os.environ.get("KVCEPH_ENGINE_RGW_DNS", "s3.local")
AK, SK = os.environ.get("KVCEPH_ENGINE_S3_KEYS", "testaccess:testsecret").split(":", 1)
MODEL = "Qwen/Qwen3-32B"
LAB = {"model_name": MODEL, "engine": "0"}
SRC = "vllm:prompt_tokens_by_source_total"


def _reachable() -> bool:
    host, port = RGW.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


boto3 = pytest.importorskip("boto3")
pytestmark = [
    pytest.mark.skipif(not _reachable(), reason=f"no RGW at {RGW}"),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root"),
]


@pytest.fixture
def bucket():
    s3 = boto3.client("s3", endpoint_url=f"http://{RGW}", aws_access_key_id=AK,
                      aws_secret_access_key=SK, region_name="default")  # fmt: skip
    name = "lmc-" + uuid.uuid4().hex[:10]
    s3.create_bucket(Bucket=name)
    yield s3, name
    for o in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=o["Key"])
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def lab_host(tmp_path, engine_env, bucket, start_engine):
    """Files as the deploy writes them on an inference host + a way to start the engine."""
    s3, name = bucket
    host, port = RGW.rsplit(":", 1)
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{host} {name}.{DNS} {DNS}\n")
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        f"[lmcache]\naws_access_key_id = {AK}\naws_secret_access_key = {SK}\n"
    )
    cfg = tmp_path / "lmcache.yaml"

    def write_cfg(algorithm="sha256_cbor", chunk=16):
        cfg.write_text(
            f"chunk_size: {chunk}\nlocal_cpu: false\nmax_local_cpu_size: 1\n"
            f'remote_url: "s3://{name}.{DNS}:{port}"\nsave_unfull_chunk: false\n'
            f'remote_serde: "naive"\npre_caching_hash_algorithm: {algorithm}\n'
            'extra_config:\n  s3_region: "default"\n  disable_tls: true\n'
            "  s3_prefer_http2: false\n  save_chunk_meta: false\n"
        )

    write_cfg()
    env = dict(engine_env, LMCACHE_CONFIG_FILE=str(cfg), AWS_PROFILE="lmcache", HOME=str(home))
    prefix = ["unshare", "-m", "sh", "-c", f'mount --bind {hosts} /etc/hosts && exec "$@"', "-"]

    def start(tp=2, seed="67", extra=(), kv=KV_OK, **envs):
        e_env = dict(env, PYTHONHASHSEED=seed, **envs)
        args = ["--max-model-len", "8192", "--tensor-parallel-size", str(tp),
                "--kv-transfer-config", kv, "--prefill-ms-per-token", "2", *extra]  # fmt: skip
        return start_engine(args, e_env, model=MODEL, prefix=prefix)

    return s3, name, start, write_cfg, home


def keys_in(s3, name):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=name).get("Contents", []))


def ttft(e, prompt):
    t0 = time.monotonic()
    e.complete(prompt, max_tokens=1)
    return time.monotonic() - t0


PROMPT = "0 " + "hi " * 999  # 1000 tokens = 62 full 16-token chunks + 8


def test_cold_warm_cold(lab_host):
    s3, name, start, _, _ = lab_host
    e = start()
    cold = ttft(e, PROMPT)
    e.stop()
    hasher = ChunkHasher(model=MODEL, world_size=2, kv_dtype="bfloat16", chunk_size=16,
                         save_unfull_chunk=False, algorithm="sha256_cbor", seed="67")  # fmt: skip
    expected = sorted(
        object_name(hasher.key_string(h, w))
        for h in hasher.chunk_hashes(tokenize(PROMPT))
        for w in (0, 1)
    )
    assert keys_in(s3, name) == expected and len(expected) == 124
    body = s3.get_object(Bucket=name, Key=expected[0])["Body"].read()
    assert body == object_payload(expected[0], 64 * 16)

    e = start()  # restart: GPU cache empty, the KV comes from Ceph
    warm = ttft(e, PROMPT)
    m = e.metrics()
    assert metric(m, SRC, source="external_kv_transfer", **LAB) == 992
    assert metric(m, SRC, source="local_compute", **LAB) == 8
    assert metric(m, "vllm:external_prefix_cache_hits_total", **LAB) == 992
    assert "hit_tokens=992" in e.logs()
    e.stop()
    assert warm < cold / 2, (cold, warm)

    for k in keys_in(s3, name):
        s3.delete_object(Bucket=name, Key=k)
    e = start()
    ttft(e, PROMPT)
    m = e.metrics()
    assert metric(m, SRC, source="external_kv_transfer", **LAB) == 0
    assert metric(m, SRC, source="local_compute", **LAB) == 1000
    assert len(keys_in(s3, name)) == 124


def test_other_seed_or_tp_misses_same_seed_hits(lab_host):
    s3, name, start, write_cfg, _ = lab_host
    write_cfg(algorithm="builtin")  # Python hash(): only PYTHONHASHSEED makes it shareable
    start(tp=1, seed="67").complete(PROMPT)
    assert len(keys_in(s3, name)) == 62
    for tp, seed in ((1, "68"), (2, "67")):  # other seed -> other hashes; other TP -> other keys
        e = start(tp=tp, seed=seed)
        e.complete(PROMPT)
        assert metric(e.metrics(), SRC, source="external_kv_transfer", **LAB) == 0, (tp, seed)
    e = start(tp=1, seed="67")
    e.complete(PROMPT)
    assert metric(e.metrics(), SRC, source="external_kv_transfer", **LAB) == 992


def test_bad_credentials_serve_and_recompute(lab_host):
    s3, name, start, _, home = lab_host
    (home / ".aws" / "credentials").write_text(
        f"[lmcache]\naws_access_key_id = {AK}\naws_secret_access_key = wrong\n"
    )
    e = start()
    e.complete(PROMPT)
    e.complete("1 " + PROMPT)
    assert keys_in(s3, name) == []
    assert "Failed to upload" in e.logs() and "S3 connection disabled" not in e.logs()
    assert metric(e.metrics(), SRC, source="external_kv_transfer", **LAB) == 0


def test_corrupt_object_loaded_changes_the_answer_a_short_one_is_recomputed(lab_host):
    s3, name, start, _, _ = lab_host
    honest = start().complete(PROMPT, max_tokens=16)["choices"][0]["text"]
    keys = keys_in(s3, name)
    hasher = ChunkHasher(model=MODEL, world_size=2, kv_dtype="bfloat16", chunk_size=16,
                         save_unfull_chunk=False, algorithm="sha256_cbor", seed="67")  # fmt: skip
    third = object_name(hasher.key_string(hasher.chunk_hashes(tokenize(PROMPT))[2], 1))
    assert third in keys
    assert start().complete(PROMPT, max_tokens=16)["choices"][0]["text"] == honest
    # The right size, other bytes: the stock connector hands them over, the answer changes.
    s3.put_object(Bucket=name, Key=third, Body=b"x" * (64 * 16))
    e = start()
    assert e.complete(PROMPT, max_tokens=16)["choices"][0]["text"] != honest
    assert metric(e.metrics(), SRC, source="external_kv_transfer", **LAB) == 992
    # Short: the lookup's size check misses it; recomputed from there, the honest answer.
    s3.put_object(Bucket=name, Key=third, Body=b"x" * 10)
    e = start()
    assert e.complete(PROMPT, max_tokens=16)["choices"][0]["text"] == honest
    assert metric(e.metrics(), SRC, source="external_kv_transfer", **LAB) == 32
    # A GET the connector refuses (kv_load_failure_policy recompute / fail): test_answer.py.
