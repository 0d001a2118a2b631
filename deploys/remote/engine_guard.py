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

Drain (with or without an API key): while the file ``<KVCEPH_DRAIN_DIR>/drain-<port>``
(default ``/run/kvceph``; ``<port>`` the engine's listening port) exists, is not the file
that stood there when this process started and holds a Unix time still ahead (the lease), the
gate admits no new request: ``/health`` and ``/ping`` answer
``503 {"status": "draining", "open_requests": N}`` (a load balancer takes the engine out; N is
the gate's own count of open requests, streams included), every other route ``503`` with
``Retry-After``, a websocket is closed with 1013; ``/metrics`` still answers. The deploy
writes the file as root over SSH (only root can write ``/run/kvceph``, so no client can drain
an engine); the file found at start is one meant for the process before it (told by its
identity, not by comparing its mtime with the clock: file times come from the kernel's coarse
clock, milliseconds behind ``time.time()``), and a lease that ran out (a deploy killed
mid-drain) ends the drain by itself.

LMCache MP server metrics: with ``KVCEPH_MP_METRICS_URL`` set (the host's first engine in MP
mode: ``http://127.0.0.1:8090/metrics``), the gate answers ``/kvceph/mp-server/metrics`` itself
with that server's ``/metrics`` text, under the same rule as ``/metrics`` (the open networks, else
the key), drain or not: the server's HTTP port has no authentication and stays on loopback. One
fixed loopback URL (anything else disables it), GET only, a timeout and a size limit; a server
that does not answer is ``502`` (Prometheus: ``up == 0``). Never a proxy to anything else.

Installed on inference hosts as /usr/local/lib/kvceph/kvceph_engine_guard.py (PYTHONPATH).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import os
import time
import urllib.parse
import urllib.request

OPEN_PATHS = ("/health", "/metrics")
MP_METRICS_PATH = "/kvceph/mp-server/metrics"
# The MP server's /metrics is a few KiB (tests/fixtures/mp_server/); a scrape waits this long.
MP_METRICS_TIMEOUT_S = 3.0
MP_METRICS_MAX_BYTES = 4 << 20
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
# Answered by the gate while draining (a load balancer's health checks: vLLM's and SageMaker's).
HEALTH_PATHS = ("/health", "/ping")
DRAIN_DIR = "/run/kvceph"
RETRY_AFTER = "5"  # seconds: long enough for a balancer to have taken the engine out
_BODY = json.dumps({"error": "Unauthorized"}).encode()
_DRAINING = json.dumps(
    {
        "error": {
            "message": "engine draining before a restart; retry (another engine)",
            "type": "ServiceUnavailableError",
            "param": None,
            "code": 503,
        }
    }
).encode()


def mp_metrics_url(value: str | None) -> str | None:
    """``KVCEPH_MP_METRICS_URL`` when it is a plain http URL on loopback, else None (off).

    + value: the variable's value
    """
    try:
        u = urllib.parse.urlsplit(value or "")
    except ValueError:
        return None
    if u.scheme != "http" or u.hostname not in _LOOPBACK or u.username or u.password:
        return None
    return value


def fetch_mp_metrics(url: str, timeout: float = MP_METRICS_TIMEOUT_S) -> tuple[int, bytes]:
    """(status, body) for one read of the MP server's /metrics: 200 and its text, else 502 and
    one line saying why (the server's own answer is never relayed beyond a 200's body).

    + url: the checked loopback URL; + timeout: seconds for connect and each read
    """
    # No proxy from the environment: the URL is loopback and must stay so.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as r:
            body = r.read(MP_METRICS_MAX_BYTES + 1)
    except Exception as e:  # any failure is the server not answering
        return 502, f"LMCache MP server {url}: {type(e).__name__}\n".encode()
    if len(body) > MP_METRICS_MAX_BYTES:
        return 502, f"LMCache MP server {url}: answer over {MP_METRICS_MAX_BYTES} bytes\n".encode()
    return 200, body


def _stamp(st) -> tuple:
    """A drain file's identity: a rewrite (``os.replace``: a new inode) changes it."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _drain_stamps(directory: str) -> dict[str, tuple]:
    """Every ``drain-*`` file in ``directory`` and its identity (none: an empty dict).

    + directory: ``KVCEPH_DRAIN_DIR``
    """
    try:
        names = [n for n in os.listdir(directory) if n.startswith("drain-")]
    except OSError:
        return {}
    found = {}
    for name in names:
        path = os.path.join(directory, name)
        try:
            found[path] = _stamp(os.stat(path))
        except OSError:
            continue  # removed meanwhile
    return found


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
        self._drain_dir = env.get("KVCEPH_DRAIN_DIR") or DRAIN_DIR
        self._mp_url = mp_metrics_url(env.get("KVCEPH_MP_METRICS_URL"))
        # The drain files that predate this process (their identities): meant for its predecessor.
        self._at_start = _drain_stamps(self._drain_dir)
        # One token per open request (a set: add/discard are atomic, so the lab engine's
        # threads may share the gate too); /health and /metrics are not counted.
        self._open: set[object] = set()
        self._lease: tuple[tuple, float] = ((), 0.0)

    @property
    def open_requests(self) -> int:
        """Requests admitted and not yet answered to the end (streams included)."""
        return len(self._open)

    def draining(self, scope) -> bool:
        """True while a drain file for this engine's port holds a live lease (module doc)."""
        server = scope.get("server") or ()
        if len(server) < 2 or not isinstance(server[1], int):
            return False
        path = os.path.join(self._drain_dir, f"drain-{server[1]}")
        try:
            st = os.stat(path)
        except OSError:
            return False
        stamp = _stamp(st)
        if self._at_start.get(path) == stamp:
            return False  # written for the process before this one
        if self._lease[0] != stamp:
            try:
                with open(path) as f:
                    until = float(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                until = st.st_mtime + 600  # unreadable lease: drain, but not forever
            self._lease = (stamp, until)
        return time.time() < self._lease[1]

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
        if path not in self._open_paths() or scope["type"] != "http":
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

    def _open_paths(self) -> tuple[str, ...]:
        """The paths open to the open networks: /health, /metrics and, when on, the server's."""
        return (*OPEN_PATHS, MP_METRICS_PATH) if self._mp_url else OPEN_PATHS

    def _preflight(self, scope) -> bool:
        # A CORS preflight carries no credentials by design and runs nothing.
        return (
            scope["type"] == "http"
            and scope.get("method") == "OPTIONS"
            and self._header(scope, b"origin") is not None
            and self._header(scope, b"access-control-request-method") is not None
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        if self._digest is not None and not (
            self._key_matches(scope) or self._open_from(scope) or self._preflight(scope)
        ):
            return await self._unauthorized(scope, send)
        path = scope.get("path", "").removeprefix(scope.get("root_path", "")).rstrip("/")
        metrics = ("/metrics", MP_METRICS_PATH) if self._mp_url else ("/metrics",)
        if self.draining(scope) and path not in metrics:
            return await self._refuse_draining(scope, path, send)
        if self._mp_url and path == MP_METRICS_PATH and scope["type"] == "http":
            return await self._mp_metrics(scope, send)
        if scope["type"] == "http" and path in OPEN_PATHS:
            return await self.app(scope, receive, send)
        token = object()
        self._open.add(token)
        try:
            return await self.app(scope, receive, send)
        finally:
            self._open.discard(token)

    async def _mp_metrics(self, scope, send):
        """Answer ``MP_METRICS_PATH`` with the MP server's /metrics (GET only)."""
        if scope.get("method") != "GET":
            return await _send(send, 405, b"GET only\n", [(b"allow", b"GET")])
        # In a thread: the engine's event loop must not wait on the server's answer.
        status, body = await asyncio.to_thread(fetch_mp_metrics, self._mp_url)
        kind = b"text/plain; version=0.0.4; charset=utf-8"
        await _send(send, status, body, kind=kind)

    async def _refuse_draining(self, scope, path, send):
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1013})  # try again later
        body = _DRAINING
        if path in HEALTH_PATHS:
            body = json.dumps({"status": "draining", "open_requests": self.open_requests})
            body = body.encode()
        await _send_json(send, 503, body, [(b"retry-after", RETRY_AFTER.encode())])

    async def _unauthorized(self, scope, send):
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        await _send_json(send, 401, _BODY)


async def _send_json(send, status: int, body: bytes, headers=()) -> None:
    """One whole JSON answer of the gate's own (no request reaches the engine)."""
    await _send(send, status, body, headers, b"application/json")


async def _send(send, status: int, body: bytes, headers=(), kind=b"text/plain") -> None:
    """One whole answer of the gate's own.

    + status, body, headers: the answer; + kind: its content-type
    """
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
    }
    await send(start)
    await send({"type": "http.response.body", "body": body})
