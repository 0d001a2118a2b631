"""`--middleware`: ASGI middleware classes around the lab's HTTP server, as vLLM loads them.

vLLM imports each ``module.Class`` given with ``--middleware`` and adds it with Starlette's
``app.add_middleware(cls)`` (the last one given is the outermost), outside its own API-key
check. The lab server is not ASGI, so each request is shown to the chain as an ASGI http
scope (method, path, headers, client address, body) around a stand-in app: when the request
reaches the stand-in, the lab serves it normally; when a middleware answers instead, its
answer is sent as is. That covers gatekeeping middleware (kvceph's engine gate), not
middleware that rewrites responses.
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


def gate(classes: tuple, handler, path: str, body: bytes) -> bool:
    """Run the chain for one request; True when it reached the app, else the answer is sent."""
    if not classes:
        return True
    reached = {"app": False}
    answer: dict = {"status": None, "headers": [], "body": b""}

    async def app(scope, receive, send):
        reached["app"] = True

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = list(message.get("headers") or [])
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    chain = app
    for cls in classes:
        chain = cls(app=chain)
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
    }
    asyncio.run(chain(scope, receive, send))
    if reached["app"]:
        return True
    status = answer["status"] or 500
    handler.send_response(status)
    for key, value in answer["headers"]:
        handler.send_header(key.decode("latin-1"), value.decode("latin-1"))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(answer["body"])
    return False
