"""A small S3 server on loopback that misbehaves on request, for the faults a real RGW won't do.

It speaks just enough S3 for awscrt's client (HEAD, ranged GET, PUT, DELETE; x-amz-meta-*
kept), ignores signatures, and counts requests. ``faults[object_path] = mode`` makes one
object misbehave: "403", "500", "slow" (headers after ``slow_s``), "stall" (half the body,
then silence), "truncate" (half the body, then the connection closes), "corrupt" (one byte
flipped, metadata untouched), "short" (Content-Length one byte less than stored), "drip" (the
whole body, slowly, over ``drip_s``).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class FakeS3(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, host: str = "127.0.0.1"):
        super().__init__((host, port), _Handler)
        self.objects: dict[str, tuple[bytes, dict[str, str]]] = {}
        self.faults: dict[str, str] = {}
        self.slow_s = 3.0
        self.drip_s = 1.5
        self.requests: list[tuple[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.head_delay_s = 0.0
        self.lock = threading.Lock()
        self.conns: set = set()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"{self.server_address[0]}:{self.server_address[1]}"

    def start(self) -> FakeS3:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open (keep-alive) connection."""
        self.shutdown()
        self.server_close()
        with self.lock:
            conns, self.conns = list(self.conns), set()
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request, client_address):
        # A client that gives up (a timeout or an abandoned batch: the faults under test) cuts
        # its connection; anything else is still printed by socketserver.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

    def process_request(self, request, client_address):
        with self.lock:
            self.conns.add(request)
        super().process_request(request, client_address)

    def name(self, key: str) -> str:
        """The fault/object name of an LMCache key (as the server sees the path)."""
        return "/" + key.replace("/", "_")

    def count(self, method: str) -> int:
        with self.lock:
            return sum(1 for m, _ in self.requests if m == method)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeS3

    def log_message(self, *args):  # quiet
        pass

    @contextmanager
    def _request(self):
        """The request's path; the request counts as in flight until its handler returns."""
        path = self._enter()
        try:
            yield path
        finally:
            self._leave()

    def _enter(self):
        s = self.server
        with s.lock:
            s.requests.append((self.command, self.path))
            s.in_flight += 1
            s.max_in_flight = max(s.max_in_flight, s.in_flight)
        return unquote(self.path.split("?", 1)[0])

    def _leave(self):
        with self.server.lock:
            self.server.in_flight -= 1

    def _status(self, code: int):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _lookup(self, path: str):
        """(fault, (data, meta)) for ``path``; the object None once an error was answered (the
        403/500 faults, 404 for a missing object). The "slow" fault waits before answering."""
        fault = self.server.faults.get(path)
        if fault in ("403", "500"):
            self._status(int(fault))
            return fault, None
        if fault == "slow":
            time.sleep(self.server.slow_s)
        obj = self.server.objects.get(path)
        if obj is None:
            self._status(404)
        return fault, obj

    def _headers(self, code: int, length: int, meta: dict):
        """The status line and the headers HEAD and GET share (the caller ends them)."""
        self.send_response(code)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", '"0"')
        for k, v in meta.items():
            self.send_header(k, v)

    def do_HEAD(self):
        with self._request() as path:
            time.sleep(self.server.head_delay_s)
            fault, obj = self._lookup(path)
            if obj is None:
                return
            self._headers(200, len(obj[0]), obj[1])
            self.end_headers()

    def do_GET(self):
        with self._request() as path:
            fault, obj = self._lookup(path)
            if obj is None:
                return
            data, meta = obj
            if fault == "corrupt":
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            if fault == "short":
                data = data[:-1]
            total = len(data)
            start, end = 0, total - 1
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                start, end = int(a), min(int(b) if b else total - 1, total - 1)
            body = data[start : end + 1]
            self._headers(206 if rng else 200, len(body), meta)
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
            self.end_headers()
            if fault == "drip":  # the whole body, slowly: drip_s in ten pieces
                step = max(1, len(body) // 10)
                for i in range(0, len(body), step):
                    self.wfile.write(body[i : i + step])
                    self.wfile.flush()
                    time.sleep(self.server.drip_s / 10)
                return
            if fault in ("truncate", "stall"):
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                if fault == "stall":
                    time.sleep(self.server.slow_s)
                self.close_connection = True
                return
            self.wfile.write(body)

    def do_PUT(self):
        with self._request() as path:
            n = int(self.headers.get("Content-Length", "0"))
            data = self.rfile.read(n)
            fault = self.server.faults.get(path)
            if fault in ("403", "500"):
                return self._status(int(fault))
            meta = {
                k.lower(): v for k, v in self.headers.items() if k.lower().startswith("x-amz-meta-")
            }
            self.server.objects[path] = (data, meta)
            self.send_response(200)
            self.send_header("ETag", '"0"')
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_DELETE(self):
        with self._request() as path:
            self.server.objects.pop(path, None)
            self._status(204)
