"""Chunk keys: the engine's reimplementation against LMCache's own code (tests/vectors.json,
made by tests/lmcache_oracle.py) and a few properties."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import ENGINE_PYTHON

from kvceph_lab_engine.hashing import ChunkHasher, cbor_dumps, object_name, request_path
from kvceph_lab_engine.tokenizer import apply_chat_template, tokenize

VECTORS = Path(__file__).with_name("vectors.json")

_COMPUTE = """
import json, sys
from kvceph_lab_engine.hashing import ChunkHasher
from kvceph_lab_engine.tokenizer import tokenize
out = []
for c in json.load(open(sys.argv[1]))["cases"]:
    keys = []
    for w in range(c["tp"]):
        h = ChunkHasher(model=c["model"], world_size=c["tp"], kv_dtype=c["kv_dtype"],
                        chunk_size=c["chunk_size"], save_unfull_chunk=c["save_unfull_chunk"],
                        algorithm=c["algorithm"], seed=%r)
        keys.append([h.key_string(x, w) for x in h.chunk_hashes(tokenize(c["text"]))])
    out.append(keys)
print(json.dumps(out))
"""


def test_keys_match_lmcache_vectors():
    data = json.loads(VECTORS.read_text())
    seed = data["pythonhashseed"]
    env = dict(os.environ, PYTHONHASHSEED=seed)  # builtin hash() depends on the process seed
    res = subprocess.run(
        [ENGINE_PYTHON, "-c", _COMPUTE % seed, str(VECTORS)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(res.stdout)
    for case, keys in zip(data["cases"], got, strict=True):
        assert keys == case["keys_by_worker"], case["name"]


def test_builtin_depends_on_pythonhashseed():
    code = (
        "from kvceph_lab_engine.hashing import ChunkHasher as C;"
        "h=C(model='m',world_size=1,kv_dtype='bfloat16',chunk_size=2,save_unfull_chunk=False,"
        "algorithm='builtin',seed=__import__('os').environ['PYTHONHASHSEED']);"
        "print(h.chunk_hashes([1,2,3,4]))"
    )

    def run(seed):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        return subprocess.run(
            [ENGINE_PYTHON, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout

    assert run("67") == run("67")
    assert run("67") != run("68")


def _hasher(**kw):
    args = dict(
        model="Qwen/Qwen3-32B",
        world_size=2,
        kv_dtype="bfloat16",
        chunk_size=4,
        save_unfull_chunk=False,
        algorithm="sha256_cbor",
        seed="67",
    )
    args.update(kw)
    return ChunkHasher(**args)


def test_prefix_property_and_unfull():
    h = _hasher()
    a = h.chunk_hashes(list(range(10)))
    b = h.chunk_hashes(list(range(8)) + [99, 98, 97, 96])
    assert len(a) == 2 and a == b[:2] and len(b) == 3
    assert len(_hasher(save_unfull_chunk=True).chunk_hashes(list(range(10)))) == 3
    c = h.chunk_hashes([5] + list(range(1, 10)))
    assert c[0] != a[0] and c[1] != a[1]  # one different token invalidates every later chunk


def test_seed_changes_sha256_cbor_chain():
    assert _hasher(seed="1").chunk_hashes([1, 2, 3, 4]) != _hasher().chunk_hashes([1, 2, 3, 4])


def test_key_and_object_names():
    h = _hasher()
    k = h.key_string(0xABC, 1)
    assert k == "Qwen/Qwen3-32B@2@1@abc@bfloat16"
    assert object_name(k) == "Qwen_Qwen3-32B@2@1@abc@bfloat16"
    assert request_path(k) == "/Qwen_Qwen3-32B%402%401%40abc%40bfloat16"


def test_unknown_algorithm_falls_back_to_builtin_and_xxhash_refused():
    assert _hasher(algorithm="nonsense").algorithm == "builtin"
    with pytest.raises(ValueError):
        _hasher(algorithm="xxhash")
    with pytest.raises(ValueError, match="Unsupported dtype"):
        _hasher(kv_dtype="complex64")


def test_cbor_subset_matches_cbor2_when_available():
    cbor2 = pytest.importorskip("cbor2")
    for o in [None, 0, 23, 24, 256, 2**32, 2**64 - 1, 2**64, -1, -(2**64) - 1, "67", b"x",
              (1, (2, 3), ()), [True, False]]:  # fmt: skip
        assert cbor_dumps(o) == cbor2.dumps(o, canonical=True), o


def test_tokenizer_and_chat_template():
    assert tokenize("hi  hi\nhi") == [tokenize("hi")[0]] * 3
    assert tokenize("") == []
    msgs = [{"role": "system", "content": "a b"}, {"role": "user", "content": [
        {"type": "text", "text": "c"}, {"type": "image_url", "image_url": {}}]}]  # fmt: skip
    assert tokenize(apply_chat_template(msgs)) == tokenize("a b c")
    with pytest.raises(ValueError):
        apply_chat_template([])
