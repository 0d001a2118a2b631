"""S3 access the way LMCache 0.5.6's S3Connector does it (awscrt S3 client).

Mirrors lmcache/v1/storage_backend/connector/s3_connector.py + s3_adapter.py:
- remote_url "s3://<bucket>.<dns_name>[:port]": "s3://" stripped, the rest is sent as the
  HTTP Host header (virtual-hosted addressing only); the CRT client connects to that host:port.
- region = extra_config.s3_region (required); TLS off only when extra_config.disable_tls;
  s3_prefer_http2 (default True) adds an ALPN h2/http1.1 TLS context.
- credentials: static aws_access_key_id/aws_secret_access_key from extra_config, else the
  awscrt default chain (env, AWS_PROFILE + $HOME/.aws/credentials, ...).
- HEAD failures count as a miss (never as a connection failure); GET/PUT failures whose error
  text has CONNECTION_REFUSED, SOCKET, DNS or TIMEOUT count; after 3 in a row the connector
  disables itself for the process lifetime ("S3 connection disabled ...").
"""

from __future__ import annotations

import io
import logging
import threading
from dataclasses import dataclass

from kvceph_lab_engine.hashing import request_path

log = logging.getLogger("kvceph_lab_engine.s3")

MAX_CONNECTION_FAILURES = 3


@dataclass(frozen=True)
class S3Settings:
    remote_url: str
    region: str
    disable_tls: bool = False
    prefer_http2: bool = True
    enable_s3express: bool = False
    num_io_threads: int = 64
    access_key_id: str | None = None
    secret_access_key: str | None = None

    @property
    def endpoint(self) -> str:
        """The Host header LMCache sends: remote_url without 's3://'."""
        return self.remote_url.removeprefix("s3://")

    @property
    def bucket(self) -> str:
        return self.endpoint.split(":", 1)[0].split(".", 1)[0]


def settings_from_extra(remote_url: str, extra: dict | None) -> S3Settings:
    """Read extra_config like S3ConnectorAdapter.create_connector (same bool() quirks)."""
    if not remote_url.startswith("s3://"):
        raise ValueError("S3 url must start with 's3://'")
    extra = extra if extra is not None else {}
    assert not bool(extra.get("save_chunk_meta", False)), "save_chunk_meta must be False for S3"
    region = extra.get("s3_region", None)
    assert region is not None, "s3_region is required"
    return S3Settings(
        remote_url=remote_url,
        region=str(region),
        disable_tls=bool(extra.get("disable_tls", False)),
        prefer_http2=bool(extra.get("s3_prefer_http2", True)),
        enable_s3express=bool(extra.get("s3_enable_s3express", False)),
        num_io_threads=int(extra.get("s3_num_io_threads", 64)),
        access_key_id=extra.get("aws_access_key_id", None),
        secret_access_key=extra.get("aws_secret_access_key", None),
    )


def is_connection_error(msg: str) -> bool:
    return any(s in msg for s in ("CONNECTION_REFUSED", "SOCKET", "DNS", "TIMEOUT"))


class S3Store:
    """Blocking HEAD/GET/PUT of LMCache objects with LMCache's circuit breaker."""

    def __init__(self, settings: S3Settings):
        from awscrt import auth, s3
        from awscrt import io as crt_io
        from awscrt.io import ClientTlsContext, TlsConnectionOptions, TlsContextOptions

        self._s3 = s3
        self.settings = settings
        elg = crt_io.EventLoopGroup(settings.num_io_threads)
        resolver = crt_io.DefaultHostResolver(elg)
        bootstrap = crt_io.ClientBootstrap(elg, resolver)
        if settings.access_key_id and settings.secret_access_key:
            log.info("Using explicit AWS credentials passed to S3Connector")
            self.credentials = auth.AwsCredentialsProvider.new_static(
                settings.access_key_id, settings.secret_access_key
            )
        else:
            log.info("No credentials provider, trying to use credentials from environment")
            self.credentials = auth.AwsCredentialsProvider.new_default_chain(bootstrap)
        tls_opts = None
        if settings.prefer_http2:
            tls_opts = TlsConnectionOptions(ClientTlsContext(TlsContextOptions()))
            try:
                tls_opts.set_alpn_list(["h2", "http/1.1"])
            except Exception:
                tls_opts = None
        tls_mode = (
            s3.S3RequestTlsMode.DISABLED if settings.disable_tls else s3.S3RequestTlsMode.ENABLED
        )
        self.client = s3.S3Client(
            bootstrap=bootstrap,
            region=settings.region,
            enable_s3express=settings.enable_s3express,
            tls_connection_options=tls_opts,
            tls_mode=tls_mode,
        )
        self._lock = threading.Lock()
        self.connection_failures = 0
        self.disabled = False
        self.size_cache: dict[str, int] = {}
        log.info(
            "S3 connector: Host=%s bucket=%s region=%s tls=%s",
            settings.endpoint,
            settings.bucket,
            settings.region,
            "off" if settings.disable_tls else "on",
        )

    # -- circuit breaker (S3Connector._update_connection_failures / _reset_...) ------------
    def _failed(self, msg: str) -> bool:
        if not is_connection_error(msg):
            return False
        with self._lock:
            self.connection_failures += 1
            log.error(
                "S3 connection error (%s/%s): %s",
                self.connection_failures,
                MAX_CONNECTION_FAILURES,
                msg,
            )
            if self.connection_failures >= MAX_CONNECTION_FAILURES and not self.disabled:
                self.disabled = True
                log.error(
                    "S3 connection disabled after %s consecutive failures. "
                    "All future S3 operations will be skipped.",
                    MAX_CONNECTION_FAILURES,
                )
        return True

    def _ok(self) -> None:
        with self._lock:
            if self.connection_failures > 0:
                log.info("S3 connection recovered")
                self.connection_failures = 0

    def _submit(self, method: str, key: str, rtype, body: bytes | None = None):
        from awscrt.http import HttpHeaders, HttpRequest

        headers = HttpHeaders()
        headers.add("Host", self.settings.endpoint)
        stream = None
        if body is not None:
            headers.add("Content-Length", str(len(body)))
            headers.add("Content-Type", "application/octet-stream")
            stream = io.BytesIO(body)
        req = HttpRequest(method, request_path(key), headers, body_stream=stream)
        got: dict = {"status": None, "len": None, "body": bytearray()}

        def on_headers(status_code, headers, **kwargs):
            got["status"] = status_code
            for name, value in headers:
                if name.lower() == "content-length":
                    try:
                        got["len"] = int(value)
                    except ValueError:
                        pass

        def on_body(chunk, offset, **kwargs):
            buf = got["body"]
            end = offset + len(chunk)
            if len(buf) < end:
                buf.extend(b"\0" * (end - len(buf)))
            buf[offset:end] = chunk

        def on_done(error=None, status_code=None, **kwargs):
            got["error"] = error
            if status_code is not None:
                got["status"] = status_code

        kwargs = {}
        if method == "HEAD":
            kwargs["operation_name"] = "HeadObject"
        s3_req = self._s3.S3Request(
            client=self.client,
            type=rtype,
            request=req,
            on_headers=on_headers,
            on_body=on_body if method == "GET" else None,
            on_done=on_done,
            credential_provider=self.credentials,
            region=self.settings.region,
            **kwargs,
        )
        return got, s3_req

    @staticmethod
    def _wait(pending):
        got, s3_req = pending
        exc = None
        try:
            s3_req.finished_future.result()
        except Exception as e:  # awscrt raises on transport errors and non-2xx statuses
            exc = e
        return got, exc

    def _answer(self, pending, ok: tuple[int, ...], failure: str, key: str) -> dict | None:
        """A GET's or PUT's answer once it finished; None when it failed or answered a status
        outside ``ok``: logged as ``failure % (key, why)`` (LMCache's words), or counted by the
        breaker when it is a connection error."""
        got, exc = self._wait(pending)
        if exc is None and got["status"] in ok:
            return got
        msg = str(exc) if exc is not None else f"status {got['status']}"
        if not self._failed(msg):
            log.error(failure, key, msg)
        return None

    def _request(self, method: str, key: str, rtype, body: bytes | None = None):
        return self._wait(self._submit(method, key, rtype, body))

    # -- operations ---------------------------------------------------------------------------
    def head(self, key: str) -> int:
        """Object size, 0 when absent or on any error (LMCache: a miss, not a failure)."""
        if self.disabled:
            return 0
        # LMCache's _batched_async_contains caches misses too (size 0): a key that missed
        # once stays a miss for this process until this process PUTs it.
        cached = self.size_cache.get(key)
        if cached is not None:
            return cached
        got, exc = self._request("HEAD", key, self._s3.S3RequestType.DEFAULT)
        status = got["status"]
        if exc is not None or status != 200:
            if status not in (404, None):
                log.warning("Encountering error in S3 HEAD request with error code: %s", status)
            elif status is None:
                log.debug("S3 HEAD %s failed: %s", key, exc)
            self.size_cache[key] = 0
            return 0
        size = got["len"] or 0
        self.size_cache[key] = size
        return size

    def get(self, key: str) -> bytes | None:
        return self.get_many([key])[0]

    def get_many(self, keys: list[str], sizes: list[int] | None = None) -> list[bytes | None]:
        """Concurrent GETs (LMCache batched_get: all downloads in flight, then gather).

        + keys: object names. + sizes: unused (the stock connector learns them by HEAD).
        """
        if self.disabled:
            return [None] * len(keys)
        pending = [self._submit("GET", k, self._s3.S3RequestType.GET_OBJECT) for k in keys]
        out: list[bytes | None] = []
        any_ok = False
        for key, p in zip(keys, pending, strict=True):
            got = self._answer(p, (200, 206), "Failed to download %s from S3: %s", key)
            any_ok = any_ok or got is not None
            out.append(None if got is None else bytes(got["body"]))
        if any_ok:
            self._ok()
        return out

    def put(self, key: str, data: bytes) -> bool:
        return self.put_many([(key, data)])[0]

    def put_many(self, items: list[tuple[str, bytes]]) -> list[bool]:
        """Concurrent PUTs (LMCache submits every chunk's put to its executor)."""
        if self.disabled:
            return [False] * len(items)
        pending = [
            self._submit("PUT", k, self._s3.S3RequestType.PUT_OBJECT, body=d) for k, d in items
        ]
        out = []
        for (key, data), p in zip(items, pending, strict=True):
            if self._answer(p, (200, 201), "Failed to upload %s to S3: %s", key) is None:
                out.append(False)
                continue
            self.size_cache[key] = len(data)
            self._ok()
            out.append(True)
        return out
