"""The lab engine's answer depends on the KV bytes it holds: an honest load (S3 or DRAM) gives
the cold answer, one chunk's bytes changed at the same size give another, a GET the connector
refuses is recomputed (the cold answer again) or fails the request, as kv_load_failure_policy
says. Its OpenAI API returns vLLM's logprobs, token ids with return_tokens_as_token_ids.

Driven in process with test_limits' in-memory store.
"""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from test_limits import BYTES, CHUNK, MemoryStore, doc, hasher

from kvceph_lab_engine import answer
from kvceph_lab_engine.engine import KVEngine, LoadFailed, LoadLimits, LocalCpuTier
from kvceph_lab_engine.metrics import Metrics
from kvceph_lab_engine.server import App, make_server

N = 16  # tokens per answer


def engine(store, dram: bool = False, policy: str = "recompute", cache: int = 0) -> KVEngine:
    """A fresh engine process (a restart): empty prefix cache and DRAM tier."""
    return KVEngine(
        hasher=hasher(), tp=2, bytes_per_token=BYTES, prefill_ms_per_token=0.0, store=store,
        local_cpu=LocalCpuTier(1 << 22) if dram else None, load_failure_policy=policy,
        local_cache_tokens=cache, limits=LoadLimits(),
    )  # fmt: skip


def ask(e: KVEngine, tokens: list[int]):
    """(result, answer token ids) of one request, its chunks saved as the server does."""
    result, chunks = e.prefill("r", tokens)
    e.save("r", chunks)
    return result, answer.tokens(tokens, result.kv, N)


def second_chunk_key(e: KVEngine, tokens: list[int]) -> str:
    return e.keys_for(e.hasher.chunk_hashes(tokens)[1])[1]


def test_an_honest_load_from_s3_dram_or_the_prefix_cache_gives_the_cold_answer():
    store, tokens = MemoryStore(), doc(8 * CHUNK + 5)
    a = engine(store, dram=True, cache=1 << 16)
    cold, cold_answer = ask(a, tokens)
    assert cold.loaded == 0 and len(cold_answer) == N and len(set(cold_answer)) > 1
    repeat, again = ask(a, tokens)  # vLLM's prefix cache
    assert repeat.local_hit > 0 and again == cold_answer
    dram, from_dram = ask(engine(store, dram=True), tokens)  # a restart: S3 into DRAM
    assert dram.loaded == 8 * CHUNK and from_dram == cold_answer
    warm, from_s3 = ask(engine(store), tokens)
    assert warm.loaded == 8 * CHUNK and warm.dram_loaded == 0 and from_s3 == cold_answer
    # Another prompt, another answer.
    assert ask(engine(store), doc(8 * CHUNK + 6))[1] != cold_answer


def test_one_chunks_bytes_changed_at_the_same_size_change_the_answer():
    store, tokens = MemoryStore(), doc(8 * CHUNK + 5)
    a = engine(store)
    _, cold_answer = ask(a, tokens)
    key = second_chunk_key(a, tokens)
    body = bytearray(store.objects[key])
    body[100] ^= 1  # one flipped bit
    store.objects[key] = bytes(body)
    warm, wrong = ask(engine(store), tokens)
    assert warm.loaded == 8 * CHUNK  # loaded whole: nothing checks the bytes, as on a GPU
    assert wrong != cold_answer
    # Another chunk's bytes (stale, of the right size): wrong as well.
    store.objects[key] = store.objects[second_chunk_key(a, doc(8 * CHUNK + 6))] = bytes(len(body))
    assert ask(engine(store), tokens)[1] not in (cold_answer, wrong)
    # The DRAM tier keeps what S3 served: a same-node repeat repeats the wrong answer.
    b = engine(store, dram=True)
    first = ask(b, tokens)[1]
    repeat, second = ask(b, tokens)
    assert repeat.dram_loaded == 8 * CHUNK and second == first != cold_answer


class Refusing(MemoryStore):
    """A connector that refuses one object's body (crc32c mismatch): a failed GET."""

    def __init__(self, objects: dict, refused: str):
        super().__init__()
        self.objects, self.refused = objects, refused

    def get_many(self, keys, sizes=None):
        return [None if k == self.refused else self.objects.get(k) for k in keys]


def test_a_refused_body_is_recomputed_to_the_cold_answer_or_fails_the_request():
    store, tokens = MemoryStore(), doc(8 * CHUNK + 5)
    a = engine(store)
    _, cold_answer = ask(a, tokens)
    key = second_chunk_key(a, tokens)
    store.objects[key] = bytes(len(store.objects[key]))
    refusing = Refusing(store.objects, key)
    warm, got = ask(engine(refusing), tokens)
    assert warm.loaded == CHUNK and got == cold_answer  # the chunks after it recomputed
    with pytest.raises(LoadFailed, match="KV load failed for tokens 256-512"):
        engine(refusing, policy="fail").prefill("r", tokens)


def _post(base: str, path: str, body: dict) -> str:
    req = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def test_the_api_returns_the_answer_as_vllm_token_ids():
    store, tokens = MemoryStore(), doc(2 * CHUNK)
    e = engine(store)
    _, cold_answer = ask(e, tokens)
    app = App(model="m", max_model_len=8192, engine=e, metrics=Metrics("m"), vllm_version="0.33.0")
    server = make_server("127.0.0.1", 0, app)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    ids = {"return_tokens_as_token_ids": True, "max_tokens": N, "temperature": 0, "seed": 0}
    try:
        plain = json.loads(_post(base, "/v1/completions", {"prompt": tokens, "max_tokens": N}))
        assert plain["choices"][0]["logprobs"] is None  # not asked for: none, as in vLLM
        assert plain["choices"][0]["text"] == "".join(answer.text(t) for t in cold_answer)
        done = json.loads(_post(base, "/v1/completions", {"prompt": tokens, "logprobs": 0, **ids}))
        assert done["choices"][0]["logprobs"]["tokens"] == [f"token_id:{t}" for t in cold_answer]
        events = _post(
            base,
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "w " * 10}], "logprobs": True,
             "stream": True, **ids},
        )  # fmt: skip
        chunks = [json.loads(x[6:]) for x in events.split("\n\n") if x.startswith("data: {")]
        got = [
            int(item["token"].removeprefix("token_id:"))
            for c in chunks
            for item in ((c["choices"][0]["logprobs"] or {}).get("content") or ())
        ]
        assert len(got) == N and chunks[1]["choices"][0]["delta"]["content"] == answer.text(got[0])
    finally:
        server.shutdown()
