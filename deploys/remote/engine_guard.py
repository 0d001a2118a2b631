"""kvceph's gate in front of every vLLM route (`vllm serve --middleware kvceph_engine_guard.Guard`).

vLLM's own API-key check guards only /v1, /v2 and /inference: /invocations (a generation
route), /tokenize, /detokenize, /classify, /pooling, /score, /rerank, /metrics, /health and more
answer without a key. This pure ASGI middleware (no imports beyond the standard library)
closes them: with ``VLLM_API_KEY`` set, every request needs ``Authorization: Bearer <key>``,
except ``/health`` and ``/metrics`` from the networks in ``KVCEPH_OPEN_NETWORKS``
(comma-separated CIDRs; an IPv4 client of a dual-stack ``--host ::`` socket, seen as
``::ffff:a.b.c.d``, is matched as the IPv4 address it is). A refusal is vLLM's own:
``401 {"error": "Unauthorized"}`` (a websocket is closed with 1008). Without ``VLLM_API_KEY``
it passes everything, like vLLM.

Installed on inference hosts as /usr/local/lib/kvceph/kvceph_engine_guard.py (PYTHONPATH).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os

OPEN_PATHS = ("/health", "/metrics")
_BODY = json.dumps({"error": "Unauthorized"}).encode()


class Guard:
    def __init__(self, app, environ=None):
        env = os.environ if environ is None else environ
        self.app = app
        key = env.get("VLLM_API_KEY", "")
        self._digest = hashlib.sha256(key.encode()).digest() if key else None
        self._networks = [
            ipaddress.ip_network(n.strip(), strict=False)
            for n in env.get("KVCEPH_OPEN_NETWORKS", "").split(",")
            if n.strip()
        ]

    def _header(self, scope, name: bytes) -> str | None:
        for key, value in scope.get("headers") or ():
            if key.lower() == name:
                return value.decode("latin-1")
        return None

    def _key_matches(self, scope) -> bool:
        scheme, _, token = (self._header(scope, b"authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(hashlib.sha256(token.encode()).digest(), self._digest)

    def _open_from(self, scope) -> bool:
        path = scope.get("path", "").removeprefix(scope.get("root_path", "")).rstrip("/")
        if path not in OPEN_PATHS or scope["type"] != "http":
            return False
        client = scope.get("client")
        try:
            address = ipaddress.ip_address(client[0]) if client else None
        except ValueError:
            return False
        if address is None:
            return False
        # `--host ::` opens a dual-stack socket: IPv4 clients (the deploy's own readiness check
        # on 127.0.0.1, a Prometheus network) arrive as ::ffff:a.b.c.d, outside 127.0.0.0/8.
        mapped = getattr(address, "ipv4_mapped", None)
        forms = (address,) if mapped is None else (address, mapped)
        return any(form in net for form in forms for net in self._networks)

    def _preflight(self, scope) -> bool:
        # A CORS preflight carries no credentials by design and runs nothing.
        return (
            scope["type"] == "http"
            and scope.get("method") == "OPTIONS"
            and self._header(scope, b"origin") is not None
            and self._header(scope, b"access-control-request-method") is not None
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or self._digest is None:
            return await self.app(scope, receive, send)
        if self._key_matches(scope) or self._open_from(scope) or self._preflight(scope):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(_BODY)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _BODY})
