"""The drain inside real vLLM's app: vLLM's own ``build_app`` (its routers, its middleware
stack with ``--middleware kvceph_engine_guard.Guard`` added by its own code, FastAPI, its
``StreamingResponse``), served by uvicorn on CPU. Stubbed: the engine client (``/health``'s
``check_health``) and the completion handler's generator (``init_app_state`` needs a model
config and an engine core), nothing else.

Not part of ``make unit``/CI: it needs vLLM importable (``pip install --no-deps vllm==0.33.0``
+ its import-time deps + a CPU torch: ~2 GB, ~15 min on the 2-core machine), more than this
issue's CI budget. Run by hand (2026-12-01: vLLM 0.33.0, torch 2.13.0+cpu, fastapi 0.165.0,
starlette 1.10.0, uvicorn 0.54.0: 2 passed in 18 s):

    python -m venv /tmp/vllm-venv && /tmp/vllm-venv/bin/pip install --no-deps vllm==0.33.0
    /tmp/vllm-venv/bin/pip install torch fastapi uvicorn transformers prometheus_client \
        prometheus-fastapi-instrumentator openai msgspec cloudpickle psutil pyzmq pydantic \
        cbor2 blake3 pybase64 cachetools partial-json-parser setproctitle einops regex urllib3 \
        requests aiohttp tqdm numpy sentencepiece tiktoken pillow pyyaml jinja2 openai-harmony \
        uvloop py-cpuinfo xgrammar llguidance watchfiles orjson \
        model-hosting-container-standards pytest
    /tmp/vllm-venv/bin/python -m pytest -q tests/vllm_app
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from httpcall import call

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # no accelerator: vLLM's CPU platform
pytest.importorskip("vllm.entrypoints.launchers.app")
uvicorn = pytest.importorskip("uvicorn")

GATE = Path(__file__).resolve().parents[2] / "deploys" / "remote"
sys.path.insert(0, str(GATE))
sys.modules.setdefault("kvceph_engine_guard", __import__("engine_guard"))

TOKENS = 40  # 40 x 50 ms: a stream open for 2 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _app(drain_dir: Path, key: str | None):
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.app import build_app
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--model", "Qwen/Qwen3-32B", "--middleware", "kvceph_engine_guard.Guard"]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    env = {"KVCEPH_DRAIN_DIR": str(drain_dir), "KVCEPH_OPEN_NETWORKS": "127.0.0.0/8"}
    if key:
        env["VLLM_API_KEY"] = key
    with mock.patch.dict(os.environ, env):
        app = build_app(args, supported_tasks=("generate",))

    class Serving:  # the completion handler: its generator streams like vLLM's SSE
        async def create_completion(self, request, raw_request):
            async def gen():
                for i in range(TOKENS):
                    await asyncio.sleep(0.05)
                    yield f"data: {json.dumps({'choices': [{'text': f' t{i}'}]})}\n\n"
                yield "data: [DONE]\n\n"

            return gen()

    async def healthy():
        return None

    app.state.engine_client = SimpleNamespace(check_health=healthy)
    app.state.openai_serving_completion = Serving()
    return app, env


@pytest.fixture(params=["api-key", "no-key"])
def server(request, tmp_path):
    key = "sk-vllm-app-test" if request.param == "api-key" else None
    app, env = _app(tmp_path, key)
    port = _free_port()
    with mock.patch.dict(os.environ, env):
        # vLLM's lifespan starts its engine-state tasks (init_app_state was not run).
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        srv = uvicorn.Server(config)
        thread = threading.Thread(target=srv.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not srv.started and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", port, key
        srv.should_exit = True
        thread.join(10)


def test_draining_refuses_new_requests_reports_health_and_lets_open_streams_finish(
    server, tmp_path
):
    url, port, key = server
    body = {"model": "Qwen/Qwen3-32B", "prompt": "hi", "max_tokens": TOKENS, "stream": True}
    assert call(url + "/health")[0] == 200
    if key:  # vLLM's own key check and the gate's are both in place
        assert call(url + "/v1/completions", body)[0] == 401
    got = {"lines": []}

    def stream():
        status, _, raw = call(url + "/v1/completions", body, key)
        got.update(status=status, lines=[x for x in raw.decode().split("\n\n") if x])

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.5)  # the stream is open inside vLLM's StreamingResponse
    status, _, raw = call(url + "/health")
    assert status == 200
    (tmp_path / f"drain-{port}").write_text(f"{time.time() + 60}\n")
    status, headers, raw = call(url + "/health")
    assert status == 503 and json.loads(raw) == {"status": "draining", "open_requests": 1}
    status, headers, raw = call(url + "/v1/completions", body, key)
    assert (status, headers.get("Retry-After")) == (503, "5")
    t.join(30)
    assert got["status"] == 200 and len(got["lines"]) == TOKENS + 1, got
    assert got["lines"][-1] == "data: [DONE]"
    status, _, raw = call(url + "/health")
    assert json.loads(raw)["open_requests"] == 0
