"""OpenAI-compatible HTTP front end (stdlib ThreadingHTTPServer), shaped like vLLM's.

GET /health (200, empty), GET /version, GET /v1/models, GET /metrics,
POST /v1/completions, POST /v1/chat/completions (stream and non-stream; with
stream_options.include_usage a last chunk carries `usage` and empty `choices`, as in vLLM),
POST /invocations (SageMaker route: a chat when the body has `messages`, else a completion),
POST /tokenize. With an API key, only vLLM's guarded prefixes need it (auth.py): /invocations
and /tokenize generate or answer without one, exactly as in vLLM.
Defaults that differ from vLLM: max_tokens defaults to 16 for chat too (vLLM: the rest of the
context); the answer is always greedy and always max_tokens long (temperature, seed and the other
sampling fields are ignored): token ids drawn from the prompt and the KV bytes the request held
(answer.py), each token's text " t<id>". ``logprobs`` answers as vLLM's (chat: ``logprobs:
true``, completions: ``logprobs: N``), every logprob 0.0; ``return_tokens_as_token_ids`` names
each token ``token_id:<id>`` as vLLM does.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kvceph_lab_engine import BANNER, __version__, answer, asgi
from kvceph_lab_engine.auth import UNAUTHORIZED, ApiKeys
from kvceph_lab_engine.engine import EngineDead, KVEngine, LoadFailed
from kvceph_lab_engine.metrics import Metrics
from kvceph_lab_engine.tokenizer import apply_chat_template, tokenize

log = logging.getLogger("kvceph_lab_engine.server")

DEFAULT_MAX_TOKENS = 16
DECODE_SECONDS_PER_TOKEN = 0.001
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


class ApiError(Exception):
    def __init__(self, status: int, message: str, etype: str = "BadRequestError", param=None):
        super().__init__(message)
        self.status, self.message, self.etype, self.param = status, message, etype, param

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.etype,
                "param": self.param,
                "code": self.status,
            }
        }


class App:
    """Everything a request handler needs."""

    def __init__(
        self,
        *,
        model: str,
        max_model_len: int,
        engine: KVEngine,
        metrics: Metrics,
        vllm_version: str,
        api_keys: ApiKeys | None = None,
        middleware: tuple = (),
        max_num_seqs: int | None = None,
    ):
        # vLLM schedules at most max_num_seqs requests; the others wait in its queue.
        self.slots = threading.BoundedSemaphore(max_num_seqs) if max_num_seqs else None
        self.api_keys = api_keys or ApiKeys([])
        # Built once, like Starlette's middleware stack: a middleware's state spans requests.
        self.middleware = asgi.chain(middleware) if middleware else None
        self.model = model
        self.max_model_len = max_model_len
        self.engine = engine
        self.metrics = metrics
        self.vllm_version = vllm_version
        self.created = int(time.time())
        # Called once when the engine core dies (the server then exits, as vLLM's does).
        self.on_dead = lambda: None

    def engine_died(self, why: str) -> None:
        log.error(
            "EngineCore failed: %s (lab engine; on the H200 this was 'torch.AcceleratorError: "
            "CUDA error: an illegal memory access was encountered')",
            why,
        )
        log.error("vllm.v1.engine.exceptions.EngineDeadError: %s", ENGINE_DEAD)
        self.on_dead()

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "kvceph-lab-engine",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": self.max_model_len,
                    "permission": [],
                    "description": BANNER,
                }
            ],
        }


def _usage(prompt: int, completion: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def _logprobs(req: dict, chat: bool, ids: list[int]) -> dict | None:
    """vLLM's ``logprobs`` of ``ids`` when the request asked for them (each 0.0: greedy), else
    None; ``return_tokens_as_token_ids`` names each token ``token_id:<id>``, as vLLM does."""
    wanted = req.get("logprobs")  # chat: true/false; completions: a count, 0 included
    if wanted is None or wanted is False:
        return None
    as_ids = bool(req.get("return_tokens_as_token_ids"))
    names = [f"token_id:{t}" if as_ids else answer.text(t) for t in ids]
    if chat:
        content = [
            {"token": name, "logprob": 0.0, "bytes": list(name.encode()), "top_logprobs": []}
            for name in names
        ]
        return {"content": content}
    offsets, at = [], 0
    for t in ids:
        offsets.append(at)
        at += len(answer.text(t))
    return {
        "text_offset": offsets,
        "token_logprobs": [0.0] * len(ids),
        "tokens": names,
        "top_logprobs": [{name: 0.0} for name in names],
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kvceph-lab-engine/" + __version__
    app: App  # set on the subclass made by make_server

    def setup(self):
        super().setup()
        # small SSE writes must not wait for delayed ACKs (uvicorn sets TCP_NODELAY too)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_HEAD(self):
        self.do_GET()

    def log_message(self, fmt, *args):  # uvicorn-like access log
        log.info('%s - "%s" %s', self.client_address[0], self.requestline, args[1] if args else "")

    # -- plumbing -----------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _sse(self, obj) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        self._chunk(f"data: {payload}\n\n".encode())

    def _authorized(self, path: str) -> bool:
        if self.app.api_keys.allows(self.command, path, self.headers.get("Authorization")):
            return True
        self._json(401, UNAUTHORIZED)
        return False

    # -- routes -------------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        asgi.gate(self.app.middleware, self, path, b"", lambda: self._get(path))

    def _get(self, path: str) -> None:
        if not self._authorized(path):
            return
        if path == "/health":
            # vLLM: 503 once the engine core is dead, until the server has shut down.
            self._send(503 if self.app.engine.dead else 200, b"")
        elif path == "/ping":
            self._send(200, b"")
        elif path == "/version":
            self._json(200, {"version": self.app.vllm_version})
        elif path == "/v1/models":
            self._json(200, self.app.models())
        elif path == "/metrics":
            self._send(200, self.app.metrics.render().encode(), "text/plain; version=0.0.4")
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        asgi.gate(self.app.middleware, self, path, body, lambda: self._post(path, body))

    def _post(self, path: str, body: bytes) -> None:
        if not self._authorized(path):
            return
        if path not in ("/v1/completions", "/v1/chat/completions", "/invocations", "/tokenize"):
            self._json(404, {"detail": "Not Found"})
            return
        try:
            req = json.loads(body or b"{}")
            if not isinstance(req, dict):
                raise ApiError(400, "request body must be a JSON object")
            if path == "/tokenize":
                tokens = self._prompt_tokens(req, chat="messages" in req)
                self._json(
                    200,
                    {
                        "count": len(tokens),
                        "max_model_len": self.app.max_model_len,
                        "tokens": tokens,
                        "token_strs": None,
                    },
                )
                return
            chat = path.endswith("chat/completions") or (
                path == "/invocations" and "messages" in req
            )
            self._generate(req, chat=chat)
        except ApiError as exc:
            self._json(exc.status, exc.body())
        except json.JSONDecodeError as exc:
            self._json(400, ApiError(400, f"invalid JSON: {exc}").body())

    # -- generation ---------------------------------------------------------------------------
    def _prompt_tokens(self, req: dict, chat: bool) -> list[int]:
        try:
            if chat:
                return tokenize(apply_chat_template(req.get("messages")))
            prompt = req.get("prompt")
            if isinstance(prompt, str):
                return tokenize(prompt)
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                return list(prompt)
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                return tokenize(prompt[0])
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        raise ApiError(400, "prompt must be a string or a list of token ids", param="prompt")

    def _generate(self, req: dict, chat: bool) -> None:
        app = self.app
        model = req.get("model", app.model)
        if model != app.model:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        tokens = self._prompt_tokens(req, chat)
        max_tokens = req.get("max_completion_tokens", req.get("max_tokens")) or DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ApiError(400, "max_tokens must be a positive integer", param="max_tokens")
        if len(tokens) + max_tokens > app.max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {app.max_model_len} tokens. However, "
                f"you requested {len(tokens) + max_tokens} tokens ({len(tokens)} in the "
                f"messages, {max_tokens} in the completion). Please reduce the length of the "
                "messages or completion.",
                param="max_tokens" if chat else "prompt",
            )
        salt = req.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            # vLLM's check_cache_salt_support (protocol.py), as its 400 words it
            raise ApiError(400, "Parameter 'cache_salt' must be a non-empty string if provided.")
        stream = bool(req.get("stream", False))
        include_usage = bool((req.get("stream_options") or {}).get("include_usage", False))
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        t_arrival = time.monotonic()
        with app.metrics._lock:
            app.metrics.waiting += 1
        if app.slots:
            app.slots.acquire()
        with app.metrics._lock:
            app.metrics.waiting -= 1
            app.metrics.running += 1
        try:
            try:
                result, to_store = app.engine.prefill(rid, tokens, salt)
            except LoadFailed as exc:
                raise ApiError(500, str(exc), "InternalServerError") from exc
            except EngineDead as exc:
                first = not getattr(app, "_dead_reported", False)
                app._dead_reported = True
                if first:
                    app.engine_died(str(exc))
                error = ApiError(500, ENGINE_DEAD, "InternalServerError")
                if not stream:
                    raise error from exc
                # vLLM has already answered 200 to a stream: the error is the next event.
                log.error("Error in completion stream generator.")
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._sse(error.body())
                self._sse("[DONE]")
                self._chunk(b"")
                return
            app.metrics.record_prefill(
                prompt=result.prompt_tokens,
                local_hit=result.local_hit,
                claimed=result.claimed,
                loaded=result.loaded,
                computed=result.computed,
                remote_read_bytes=result.remote_read_bytes,
            )
            stored = {"n": 0}
            saver = threading.Thread(
                target=lambda: stored.__setitem__("n", app.engine.save(rid, to_store, app.metrics)),
                name=f"save-{rid[:16]}",
                daemon=True,
            )
            saver.start()
            created = int(time.time())
            ids = answer.tokens(tokens, result.kv, max_tokens)
            if stream:
                self._stream(rid, chat, created, req, ids, len(tokens), include_usage, t_arrival)
            else:
                app.metrics.record_ttft(time.monotonic() - t_arrival)
                time.sleep(DECODE_SECONDS_PER_TOKEN * (max_tokens - 1))
                text = "".join(answer.text(t) for t in ids)
                choice = {"index": 0, "logprobs": _logprobs(req, chat, ids)}
                choice["finish_reason"] = "length"
                choice["stop_reason"] = None
                if chat:
                    choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
                else:
                    choice["text"] = text
                body = {
                    "id": rid,
                    "object": "chat.completion" if chat else "text_completion",
                    "created": created,
                    "model": app.model,
                    "choices": [choice],
                    "usage": _usage(len(tokens), max_tokens),
                }
            saver.join()
            if not stream:
                self._json(200, body)
            app.metrics.record_finish(max_tokens, "length")
            log.info(
                "lmcache: request=%s prompt_tokens=%d hit_tokens=%d loaded_tokens=%d "
                "dram_tokens=%d local_hit_tokens=%d computed_tokens=%d stored_chunks=%d "
                "load_s=%.3f prefill_s=%.3f",
                rid,
                result.prompt_tokens,
                result.external_hit,
                result.loaded,
                result.dram_loaded,
                result.local_hit,
                result.computed,
                stored["n"],
                result.load_seconds,
                result.prefill_seconds,
            )
            m = app.metrics
            q = m.counters["vllm:external_prefix_cache_queries"]
            h = m.counters["vllm:external_prefix_cache_hits"]
            lq = m.counters["vllm:prefix_cache_queries"]
            lh = m.counters["vllm:prefix_cache_hits"]
            log.info(
                "Engine 000: Prefix cache hit rate: %.1f%%, External prefix cache hit rate: %.1f%%",
                100.0 * lh / lq if lq else 0.0,
                100.0 * h / q if q else 0.0,
            )
        finally:
            with app.metrics._lock:
                app.metrics.running -= 1
            if app.slots:
                app.slots.release()

    def _stream(self, rid, chat, created, req, ids, n_prompt, include_usage, t_arrival):
        app = self.app
        max_tokens = len(ids)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(token: int | None, finish: str | None, role: bool = False) -> dict:
            piece = None if token is None else answer.text(token)
            logprobs = None if token is None else _logprobs(req, chat, [token])
            if chat:
                delta: dict = {}
                if role:
                    delta["role"] = "assistant"
                    delta["content"] = ""
                else:
                    delta["content"] = piece
                choice = {"index": 0, "delta": delta, "logprobs": logprobs,
                          "finish_reason": finish}  # fmt: skip
            else:
                choice = {
                    "index": 0,
                    "text": piece,
                    "logprobs": logprobs,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            return {"id": rid, "object": obj, "created": created, "model": app.model,
                    "choices": [choice]}  # fmt: skip

        try:
            if chat:
                self._sse(chunk(None, None, role=True))
            for i, token in enumerate(ids):
                if i == 0:
                    app.metrics.record_ttft(time.monotonic() - t_arrival)
                else:
                    time.sleep(DECODE_SECONDS_PER_TOKEN)
                last = i == max_tokens - 1
                self._sse(chunk(token, "length" if last else None))
            if include_usage:
                self._sse(
                    {
                        "id": rid,
                        "object": obj,
                        "created": created,
                        "model": app.model,
                        "choices": [],
                        "usage": _usage(n_prompt, max_tokens),
                    }  # fmt: skip
                )
            self._sse("[DONE]")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            log.info("client went away during stream %s", rid)


class _Server6(ThreadingHTTPServer):
    # vLLM's create_server_socket: AF_INET6 for an IPv6 --host, IPV6_V6ONLY left to the system
    # (Linux: 0), so `--host ::` also accepts IPv4 clients, seen as ::ffff:a.b.c.d.
    address_family = socket.AF_INET6


def _is_ipv6(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6, host)
    except OSError:
        return False
    return True


def make_server(host: str, port: int, app: App) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"app": app})
    server = (_Server6 if _is_ipv6(host) else ThreadingHTTPServer)((host, port), handler)
    server.daemon_threads = True
    return server
