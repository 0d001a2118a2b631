"""kvceph cache probe, run on an inference host by probe.py (engine venv's python, as the
service user, with its HOME and AWS_PROFILE: the keys come from ~/.aws like LMCache's).

Moves objects of the size LMCache writes through the S3 client LMCache 0.5.6's S3Connector
builds (lmcache/v1/storage_backend/connector/s3_connector.py + s3_adapter.py):

- one awscrt ``S3Client`` per tensor-parallel worker (LMCache runs one connector per worker),
  each on its own ``EventLoopGroup(s3_num_io_threads)``; region, ``tls_mode`` DISABLED only with
  ``disable_tls``, an h2/http1.1 ALPN TLS context only with ``s3_prefer_http2``. No
  ``part_size`` is passed: LMCache sets ``s3_part_size`` = chunk bytes but only uses it to refuse
  partial chunks, so the CRT picks its own part size, as it does in LMCache;
- virtual-hosted addressing: ``Host: <remote_url without s3://>``, path ``/<quoted key>``;
- PUT: ``PUT_OBJECT`` from a memoryview stream, at most 4 in flight per worker (LMCache's
  ``AsyncPQExecutor`` has 4 workers and each put job awaits its upload);
- lookup: sequential HEADs per worker (``_batched_async_contains``);
- GET: every chunk of the request in flight at once (``batched_get``), the body written into
  a preallocated buffer per chunk (LMCache memmoves into its pinned buffer).

With ``--connector kvceph`` the probe moves the same objects through kvceph's connector core
instead (``kvceph_connector.s3core.S3Core``, what the kvceph LMCache plugin runs): one core per
worker with ``--connections`` requests in flight, concurrent HEADs, GETs memmoved into the
buffers with size + crc32c checked, single PUTs carrying the checksum. The engine venv must hold
kvceph-connector then (the engine-software stage installs it with that connector).

Objects are named ``<prefix>kvceph-probe-<nonce>@<worker>@<index>`` (``--prefix``: the cache
group's own names, the only ones its key may write; a prefix ending in '/' is the group's
namespace folder, kept where the rest of a name has its '/' turned into '_'); each is deleted at
the end, also after a failure, where the key may delete (a group key may not: the controller
deletes them then). Prints one JSON document on stdout; exit 1 with one line on stderr when
nothing could be measured.

    python s3probe.py --endpoint BUCKET.DNS:PORT --region R --chunk-bytes B --chunks K
        --workers TP --io-threads 64 --rounds 3 --nonce N [--disable-tls] [--prefer-http2]
        [--connector kvceph --connections 16 --timeout-s 5]
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
from urllib.parse import quote

PUTS_IN_FLIGHT = 4  # LMCache 0.5.6 AsyncPQExecutor(max_workers=4)


class MemoryViewStream:
    """LMCache's zero-copy upload stream (s3_connector.MemoryViewStream)."""

    def __init__(self, data):
        self.mv = memoryview(data).cast("B")
        self.offset = 0

    def read(self, size=None):
        if size is None or size < 0:
            size = len(self.mv) - self.offset
        end = min(self.offset + size, len(self.mv))
        out = self.mv[self.offset : end]
        self.offset = end
        return out

    def seek(self, offset, whence=0):
        base = {0: 0, 1: self.offset, 2: len(self.mv)}[whence]
        self.offset = base + offset
        return self.offset

    def tell(self):
        return self.offset

    def __len__(self):
        return len(self.mv)


def _namespace(prefix: str) -> str:
    """The namespace folder of ``--prefix`` ("kv/<fields>/"), "" for a bucket-root prefix."""
    return prefix if prefix.endswith("/") else ""


def _key_prefix(prefix: str) -> str:
    """What goes before each probe key's own part once the namespace is split off."""
    return "" if prefix.endswith("/") else prefix


class Worker:
    """One TP worker's S3 client, built as S3Connector.__init__ builds it."""

    def __init__(self, args):
        from awscrt import auth, io, s3
        from awscrt.io import ClientTlsContext, TlsConnectionOptions, TlsContextOptions

        self.s3 = s3
        self.endpoint = args.endpoint
        self.region = args.region
        self.namespace = _namespace(args.prefix)
        elg = io.EventLoopGroup(args.io_threads)
        bootstrap = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
        self.credentials = auth.AwsCredentialsProvider.new_default_chain(bootstrap)
        tls_opts = None
        if args.prefer_http2:
            tls_opts = TlsConnectionOptions(ClientTlsContext(TlsContextOptions()))
            try:
                tls_opts.set_alpn_list(["h2", "http/1.1"])
            except Exception:
                tls_opts = None
        # LMCache passes no throughput target (awscrt then sizes its pool for 10 Gb/s); the
        # H200 read benchmark (hw/h200/getbench.py) may set one.
        target = getattr(args, "throughput_target_gbps", None)
        self.client = s3.S3Client(
            bootstrap=bootstrap,
            region=args.region,
            enable_s3express=False,
            tls_connection_options=tls_opts,
            tls_mode=s3.S3RequestTlsMode.DISABLED
            if args.disable_tls
            else s3.S3RequestTlsMode.ENABLED,
            **({"throughput_target_gbps": target} if target else {}),
        )

    def request(self, method, key, rtype, body=None, sink=None, op=None):
        """Submit one request; returns (finished_future, status holder)."""
        from awscrt.http import HttpHeaders, HttpRequest

        headers = HttpHeaders()
        headers.add("Host", self.endpoint)
        stream = None
        if body is not None:
            stream = MemoryViewStream(body)
            headers.add("Content-Length", str(len(stream)))
            headers.add("Content-Type", "application/octet-stream")
        req = HttpRequest(
            method, "/" + quote(self.namespace + key.replace("/", "_")), headers, body_stream=stream
        )
        got = {"status": None, "error": None}

        def on_headers(status_code, headers, **kwargs):
            got["status"] = status_code

        def on_body(chunk, offset, **kwargs):
            sink[offset : offset + len(chunk)] = chunk

        def on_done(error=None, status_code=None, **kwargs):
            got["error"] = error
            if status_code is not None:
                got["status"] = status_code

        kwargs = {"operation_name": op} if op else {}
        r = self.s3.S3Request(
            client=self.client,
            type=rtype,
            request=req,
            on_headers=on_headers,
            on_body=on_body if sink is not None else None,
            on_done=on_done,
            credential_provider=self.credentials,
            region=self.region,
            **kwargs,
        )
        return r.finished_future, got


class CoreWorker:
    """One TP worker through kvceph's connector core (the kvceph plugin's S3 client)."""

    def __init__(self, args):
        from kvceph_connector.s3core import S3Config, S3Core

        self.core = S3Core(
            S3Config(
                endpoint=args.endpoint,
                region=args.region,
                tls=not args.disable_tls,
                connections=args.connections,
                timeout_s=args.timeout_s,
                namespace=_namespace(args.prefix),
            )
        )

    def put_all(self, keys, payload):
        if not all(self.core.put_many([(k, payload) for k in keys])):
            raise SystemExit("PUT failed (the connector core logged why)")

    def heads(self, keys, out):
        t = time.monotonic()
        if None in self.core.lookup(keys):
            raise SystemExit("HEAD failed (the connector core logged why)")
        out.append((time.monotonic() - t) / max(1, len(keys)))  # per key, all in flight

    def get_all(self, keys, buffers):
        items = [(k, b, len(b)) for k, b in zip(keys, buffers, strict=True)]
        if not all(self.core.get_many_into(items)):
            raise SystemExit("GET failed (the connector core logged why)")

    def delete_all(self, keys):
        return sum(self.core.delete(keys))


def wait(pending, ok_statuses, what):
    for fut, got in pending:
        try:
            fut.result()
        except Exception as exc:
            raise SystemExit(f"{what} failed: {got['status'] or ''} {exc}".strip()) from None
        if got["status"] not in ok_statuses:
            raise SystemExit(f"{what} failed: HTTP {got['status']}")


def put_all(worker, keys, payload):
    """At most PUTS_IN_FLIGHT uploads at a time, like LMCache's put executor."""
    s3 = worker.s3
    for i in range(0, len(keys), PUTS_IN_FLIGHT):
        batch = [
            worker.request("PUT", k, s3.S3RequestType.PUT_OBJECT, body=payload)
            for k in keys[i : i + PUTS_IN_FLIGHT]
        ]
        wait(batch, (200, 201), "PUT")


def in_threads(fn, jobs):
    """Run fn(*job) for every job in parallel (the TP workers are separate processes)."""
    errors = []

    def run(job):
        try:
            fn(*job)
        except BaseException as exc:  # SystemExit from wait()
            errors.append(str(exc))

    threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(errors[0])
    return time.monotonic() - start


def heads(worker, keys, out):
    s3 = worker.s3
    for k in keys:
        t = time.monotonic()
        wait([worker.request("HEAD", k, s3.S3RequestType.DEFAULT, op="HeadObject")], (200,), "HEAD")
        out.append(time.monotonic() - t)


def get_all(worker, keys, buffers):
    s3 = worker.s3
    pending = [
        worker.request("GET", k, s3.S3RequestType.GET_OBJECT, sink=b)
        for k, b in zip(keys, buffers, strict=True)
    ]
    wait(pending, (200, 206), "GET")


def delete_all(worker, keys):
    """Delete every probe object; returns how many are gone (204 or 404)."""
    s3 = worker.s3
    pending = [
        worker.request("DELETE", k, s3.S3RequestType.DEFAULT, op="DeleteObject") for k in keys
    ]
    gone = 0
    for fut, got in pending:
        try:
            fut.result()
        except Exception:
            pass
        gone += got["status"] in (200, 204, 404)
    return gone


def parse(argv):
    p = argparse.ArgumentParser(prog="s3probe")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--region", required=True)
    p.add_argument("--chunk-bytes", type=int, required=True)
    p.add_argument("--chunks", type=int, required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--io-threads", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nonce", required=True)
    p.add_argument("--prefix", default="")
    p.add_argument("--disable-tls", action="store_true")
    p.add_argument("--prefer-http2", action="store_true")
    p.add_argument("--connector", choices=("lmcache", "kvceph"), default="lmcache")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--timeout-s", type=float, default=5.0)
    return p.parse_args(argv)


def main(argv):
    args = parse(argv)
    kvceph = args.connector == "kvceph"
    workers = [(CoreWorker if kvceph else Worker)(args) for _ in range(args.workers)]
    put_fn, head_fn, get_fn = (
        (CoreWorker.put_all, CoreWorker.heads, CoreWorker.get_all)
        if kvceph
        else (put_all, heads, get_all)
    )
    delete_fn = CoreWorker.delete_all if kvceph else delete_all
    keys = [
        [f"{_key_prefix(args.prefix)}kvceph-probe-{args.nonce}@{w}@{i}" for i in range(args.chunks)]
        for w in range(args.workers)
    ]
    # Filler, not KV: RGW stores bytes as given (no compression on this path).
    payload = (os.urandom(1 << 16) * (args.chunk_bytes // (1 << 16) + 1))[: args.chunk_bytes]
    buffers = [[bytearray(args.chunk_bytes) for _ in ks] for ks in keys]
    total = args.chunk_bytes * args.chunks * args.workers
    up, down, head_s = [], [], []
    pairs = list(zip(workers, keys, strict=True))
    try:
        for _ in range(args.rounds):
            up.append(in_threads(put_fn, [(w, k, payload) for w, k in pairs]))
            in_threads(head_fn, [(w, k, head_s) for w, k in pairs])
            down.append(
                in_threads(get_fn, [(w, k, b) for (w, k), b in zip(pairs, buffers, strict=True)])
            )
        if bytes(buffers[0][0][:64]) != payload[:64]:
            raise SystemExit("GET returned other bytes than were PUT")
    finally:
        deleted = sum(delete_fn(w, k) for w, k in pairs)
    print(
        json.dumps(
            {
                "connector": args.connector,
                "bytes_per_round": total,
                "objects": args.chunks * args.workers,
                "deleted": deleted,
                "put_seconds": up,
                "get_seconds": down,
                "head_seconds_median": statistics.median(head_s),
                "up_gb_per_s": [total / s / 1e9 for s in up],
                "down_gb_per_s": [total / s / 1e9 for s in down],
            }
        )
    )


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(f"s3probe: {exc.code}", file=sys.stderr)
            sys.exit(1)
        raise
    except ImportError as exc:
        missing = f"{getattr(exc, 'name', None) or ''}."
        lacks = "kvceph-connector" if missing.startswith("kvceph_connector.") else "awscrt"
        print(f"s3probe: {exc} (the engine venv lacks {lacks}?)", file=sys.stderr)
        sys.exit(1)
