"""The API key: guarded exactly where vLLM guards it, answered as vLLM answers."""

from __future__ import annotations

import json

import pytest
from conftest import http

from kvceph_lab_engine.auth import ApiKeys

KEY = "sk-lab-test-0123456789"
CHAT = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hi"}]}
PROMPT = {"model": "Qwen/Qwen3-32B", "prompt": "hi there", "max_tokens": 2}


@pytest.mark.parametrize(
    ("method", "path", "header", "allowed"),
    [
        ("POST", "/v1/completions", None, False),
        ("POST", "/v1/completions", f"Bearer {KEY}", True),
        ("POST", "/v1/completions", f"bearer {KEY}", True),  # scheme in any case
        ("POST", "/v1/completions", f"Basic {KEY}", False),
        ("POST", "/v1/completions", f"Bearer  {KEY}", False),  # token is everything after " "
        ("POST", "/v1/completions", "Bearer wrong", False),
        ("GET", "/v2/anything", None, False),
        ("POST", "/inference/v1/generate", None, False),
        ("OPTIONS", "/v1/completions", None, True),
        ("GET", "/health", None, True),
        ("GET", "/metrics", None, True),
        ("POST", "/invocations", None, True),
        ("POST", "/tokenize", None, True),
    ],
)
def test_guarded_prefixes_are_vllms(method, path, header, allowed):
    assert ApiKeys([KEY]).allows(method, path, header) is allowed


def test_no_key_guards_nothing():
    assert ApiKeys([""]).allows("POST", "/v1/completions", None)


def test_engine_with_key_shows_vllms_gap(engine_env, start_engine):
    engine_env["VLLM_API_KEY"] = KEY
    e = start_engine(["--max-model-len", "4096"], engine_env)
    auth = {"Authorization": f"Bearer {KEY}"}
    status, body = http("POST", e.url + "/v1/completions", PROMPT)
    assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})
    assert http("GET", e.url + "/v1/models")[0] == 401
    assert http("POST", e.url + "/v1/completions", PROMPT, headers=auth)[0] == 200
    assert http("GET", e.url + "/v1/models", headers=auth)[0] == 200
    # What vLLM leaves open: a generation route, tokenize, health and metrics.
    status, body = http("POST", e.url + "/invocations", CHAT)
    assert status == 200 and json.loads(body)["object"] == "chat.completion"
    assert json.loads(http("POST", e.url + "/tokenize", PROMPT)[1])["count"] == 2
    assert http("GET", e.url + "/health")[0] == 200
    assert http("GET", e.url + "/metrics")[0] == 200
    assert KEY not in e.logs()
