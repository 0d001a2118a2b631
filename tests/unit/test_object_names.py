"""verify's object names against the names LMCache 0.5.6's own classes give.

tests/unit/fixtures/object_names/lmcache.json was recorded by record.py beside it, in the
connector venv: real torch and LMCache (ChunkedTokenDatabase, CacheEngineKey.to_string), vLLM's
two hashing functions as vllm/utils/hashing.py defines them, and the lab engine's /tokenize of
verify's document. The lab engine writes the same names (lab/engine/tests/vectors.json); the lab
test (tests/integration/test_02_verify.py) finds every one of them in the real bucket.
"""

import json
from pathlib import Path

import pytest
from kvceph_lab_engine.tokenizer import apply_chat_template, tokenize

from deploys.verification import document, object_names

RECORDED = json.loads(
    (Path(__file__).parent / "fixtures" / "object_names" / "lmcache.json").read_text()
)


@pytest.mark.parametrize("case", RECORDED["cases"], ids=lambda c: c["name"])
def test_names_are_lmcaches(case):
    got = object_names.names(
        case["tokens"],
        model=case["model"],
        world_size=case["tp"],
        chunk_size=case["chunk_size"],
        save_unfull_chunk=case["save_unfull_chunk"],
        algorithm=case["algorithm"],
        seed=case["seed"],
        kv_dtype=case["torch_dtype"],
    )
    assert got == case["names"]
    assert len({object_names.stem(n) for n in got}) == len(got)


@pytest.mark.parametrize("case", RECORDED["cases"], ids=lambda c: c["name"])
def test_recorded_tokens_are_the_lab_engines_tokenize_of_the_document(case):
    messages = [
        {"role": "user", "content": document.prompt(RECORDED["nonce"], case["document_tokens"])}
    ]
    assert tokenize(apply_chat_template(messages)) == case["tokens"]


def test_a_seed_as_int_is_the_env_string():
    case = RECORDED["cases"][0]
    kw = dict(model=case["model"], world_size=2, chunk_size=256, save_unfull_chunk=False)
    got = object_names.names(case["tokens"], algorithm="sha256_cbor", seed=67, **kw)
    assert got == case["names"]
    other = object_names.names(case["tokens"], algorithm="sha256_cbor", seed=68, **kw)
    assert not set(other) & set(got)


def test_stem_leaves_out_the_dtype_field():
    name = "Qwen_Qwen3-32B@2@1@cf87d9ebf849bcd1@bfloat16"
    assert object_names.stem(name) == "Qwen_Qwen3-32B@2@1@cf87d9ebf849bcd1@"
    with pytest.raises(ValueError, match="not an LMCache object name"):
        object_names.stem("Qwen_Qwen3-32B@2@1")


@pytest.mark.parametrize("algorithm", ["builtin", "xxhash", "xxhash_cbor"])
def test_uncomputable_hashes_are_refused_naming_the_setting_and_the_fix(algorithm):
    why = object_names.refusal(algorithm)
    assert f"pre_caching_hash_algorithm {algorithm}" in why
    assert "fix: kvceph_lmcache_hash_algorithm: sha256_cbor" in why and "\n" not in why
    with pytest.raises(ValueError, match="cannot name the run's objects"):
        object_names.names([1] * 300, model="m", world_size=1, chunk_size=256,
                           save_unfull_chunk=False, algorithm=algorithm, seed=67)  # fmt: skip


def test_no_seed_no_names():
    with pytest.raises(ValueError, match="PYTHONHASHSEED is unknown"):
        object_names.names([1] * 300, model="m", world_size=1, chunk_size=256,
                           save_unfull_chunk=False, algorithm="sha256_cbor", seed=None)  # fmt: skip


LAB_VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "lab/engine/tests/vectors.json").read_text()
)


@pytest.mark.parametrize(
    "case",
    [c for c in LAB_VECTORS["cases"] if c["algorithm"] != "builtin"],
    ids=lambda c: c["name"],
)
def test_names_are_the_lab_engines_vectors(case):
    # The lab engine's key vectors (lab/engine/tests/lmcache_oracle.py), in the bucket's form.
    got = object_names.names(
        tokenize(case["text"]),
        model=case["model"],
        world_size=case["tp"],
        chunk_size=case["chunk_size"],
        save_unfull_chunk=case["save_unfull_chunk"],
        algorithm=case["algorithm"],
        seed=LAB_VECTORS["pythonhashseed"],
        kv_dtype=case["kv_dtype"],
    )
    by_worker = case["keys_by_worker"]
    want = [by_worker[w][i] for i in range(len(by_worker[0])) for w in range(case["tp"])]
    assert got == [k.replace("/", "_") for k in want]
