"""`--middleware`: ASGI middleware classes around the lab's HTTP server, as vLLM loads them.

vLLM imports each ``module.Class`` given with ``--middleware`` and adds it with Starlette's
``app.add_middleware(cls)`` (the last one given is the outermost), outside its own API-key
check. The lab server is not ASGI, so each request is shown to the chain as an ASGI http
scope (method, path, headers, client address, body) around a stand-in app: when the request
reaches the stand-in, the lab serves it there, inside the chain (a middleware sees the
request open until its response, a stream included, is complete, as in vLLM); when a
middleware answers instead, its answer is sent as is. The chain is built once per server, as
Starlette builds its middleware stack once, so a middleware keeps state across requests
(kvceph's gate counts open requests). That covers gatekeeping middleware (kvceph's engine
gate), not middleware that rewrites responses.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect


def load(paths: list[str]) -> tuple:
    """The classes named by ``--middleware`` (vLLM refuses a name that is neither class nor
    coroutine function; the lab takes classes only)."""
    classes = []
    for path in paths:
        module, _, name = path.rpartition(".")
        imported = getattr(importlib.import_module(module), name)
        if not inspect.isclass(imported):
            raise ValueError(f"Invalid middleware {path}. Must be a function or a class.")
        classes.append(imported)
    return tuple(classes)


SERVE = "kvceph_lab.serve"  # scope["extensions"] key: the request's handler, run by the app


async def _app(scope, receive, send):
    """The stand-in for vLLM's app: serves the request (blocking this request's own loop: the
    lab runs one thread and one event loop per request)."""
    scope["extensions"][SERVE]()


def chain(classes: tuple):
    """The middleware stack around the stand-in app (the last class given is outermost)."""
    app = _app
    for cls in classes:
        app = cls(app=app)
    return app


def gate(stack, handler, path: str, body: bytes, serve) -> None:
    """Run one request through ``stack``: ``serve()`` handles it when it reaches the app, else
    the middleware's answer is sent."""
    if stack is None:
        serve()
        return
    reached = {"app": False}
    answer: dict = {"status": None, "headers": [], "body": b""}

    def served():
        reached["app"] = True
        serve()

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = list(message.get("headers") or [])
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": handler.command,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": handler.path.partition("?")[2].encode(),
        "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in handler.headers.items()],
        "client": tuple(handler.client_address[:2]),
        "server": tuple(handler.server.server_address[:2]),
        "extensions": {SERVE: served},
    }
    asyncio.run(stack(scope, receive, send))
    if reached["app"]:
        return
    status = answer["status"] or 500
    handler.send_response(status)
    for key, value in answer["headers"]:
        handler.send_header(key.decode("latin-1"), value.decode("latin-1"))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(answer["body"])
