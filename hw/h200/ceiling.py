#!/usr/bin/env python3
"""The run's own S3 ceiling: plain parallel GETs of the bucket's objects into pinned memory, then
to the GPU, in the shape of ``s3gpu.py`` (the gpu-s3-ceiling recipe: awscrt ``on_body`` +
``ctypes.memmove`` into a pinned torch buffer, every GET in flight at once, then host->GPU).

    ceiling.py HOST:PORT BUCKET LABEL [--prefix P] [--max-gb 8] [--reps 2] [--put N MIB]

Reads the objects under PREFIX (a cell's objects: what its cold request stored), at most
MAX_GB of them (pinned memory sits beside the engine's buffer and the memstore OSDs), REPS
times; ``--put N MIB`` first writes N objects of MIB MiB under PREFIX (the layout's ceiling
before any engine ran). Credentials: awscrt's default chain (HOME, AWS_PROFILE as the
engine's). Without torch or a GPU (the CPU dry run) the buffers are plain ctypes memory and
there is no GPU step. Prints one JSON line per repetition.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import time
from urllib.parse import quote

from awscrt import auth, io, s3
from awscrt.http import HttpHeaders, HttpRequest

# what kvceph renders for this RGW (kvceph.region / s3_region): RGW takes the SigV4 scope as sent
REGION = os.environ.get("KVCEPH_H200_REGION", "default")


def _objects(host: str, bucket: str, prefix: str) -> list[tuple[str, int]]:
    import boto3

    b = boto3.Session(profile_name=os.environ.get("AWS_PROFILE")).client(
        "s3", endpoint_url=f"http://{host}", region_name=REGION
    )
    pages = b.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted((o["Key"], o["Size"]) for p in pages for o in p.get("Contents", ()))


class Client:
    def __init__(self, host: str, bucket: str):
        self.host, self.bucket = host, bucket
        elg = io.EventLoopGroup(64)
        boot = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
        self.creds = auth.AwsCredentialsProvider.new_default_chain(boot)
        self.client = s3.S3Client(
            bootstrap=boot, region=REGION, tls_mode=s3.S3RequestTlsMode.DISABLED,
            credential_provider=self.creds, throughput_target_gbps=100.0,
        )  # fmt: skip

    def request(self, kind, method: str, key: str, **kw):
        h = HttpHeaders()
        h.add("Host", f"{self.bucket}.{self.host}")
        if "body" in kw:
            h.add("Content-Length", str(len(kw["body"])))
            h.add("Content-Type", "application/octet-stream")
            import io as pyio

            kw["request_body"] = pyio.BytesIO(kw.pop("body"))
        req = HttpRequest(method, "/" + quote(key), h, kw.pop("request_body", None))
        return s3.S3Request(client=self.client, type=kind, request=req,
                            credential_provider=self.creds, region=REGION, **kw)  # fmt: skip


def _buffers(sizes: list[int]):
    """One pinned buffer per object (torch), or plain memory without torch/GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            bufs = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for n in sizes]
            return [b.data_ptr() for b in bufs], bufs, torch
    except (ImportError, OSError, ValueError):  # dry run: CUDA torch, no CUDA libs
        pass
    bufs = [(ctypes.c_char * n)() for n in sizes]
    return [ctypes.addressof(b) for b in bufs], bufs, None


def put(c: Client, prefix: str, count: int, mib: int) -> dict:
    body = os.urandom(mib << 20)
    t = time.perf_counter()
    rs = [c.request(s3.S3RequestType.PUT_OBJECT, "PUT", f"{prefix}{i}", body=body)
          for i in range(count)]  # fmt: skip
    for r in rs:
        r.finished_future.result(timeout=300)
    dt = time.perf_counter() - t
    return {"put_objects": count, "put_GBps": round(count * len(body) / dt / 1e9, 3)}


def get(c: Client, keys: list[tuple[str, int]], ptrs, bufs, torch) -> dict:
    got = [0]

    def cb(base):
        def on_body(chunk, offset, **kw):
            ctypes.memmove(base + offset, chunk, len(chunk))
            got[0] += len(chunk)

        return on_body

    t0 = time.perf_counter()
    rs = [c.request(s3.S3RequestType.GET_OBJECT, "GET", k, on_body=cb(p))
          for (k, _), p in zip(keys, ptrs, strict=True)]  # fmt: skip
    errors = 0
    for r in rs:
        try:
            r.finished_future.result(timeout=300)
        except Exception:  # noqa: BLE001 - counted, the rate then says little
            errors += 1
    t1 = time.perf_counter()
    h2d = None
    if torch is not None:
        # a ring of 16 object-sized GPU slots: the engine holds most of the GPU's memory
        ring = torch.empty((16, max(n for _, n in keys)), dtype=torch.uint8, device="cuda")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for i, b in enumerate(bufs):
                ring[i % 16, : b.numel()].copy_(b, non_blocking=True)
        stream.synchronize()
        h2d = time.perf_counter() - t1
        del ring
    total = time.perf_counter() - t0
    return {
        "objects": len(keys), "bytes": got[0], "errors": errors,
        "get_s": round(t1 - t0, 3), "get_GBps": round(got[0] / (t1 - t0) / 1e9, 3),
        "h2d_s": round(h2d, 3) if h2d is not None else None,
        "GBps": round(got[0] / total / 1e9, 3), "gpu": torch is not None,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("bucket")
    ap.add_argument("label")
    ap.add_argument("--prefix", default="")
    ap.add_argument("--max-gb", type=float, default=8.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--put", nargs=2, type=int, metavar=("N", "MIB"))
    a = ap.parse_args()
    c = Client(a.host, a.bucket)
    extra = put(c, a.prefix, *a.put) if a.put else {}
    found = _objects(a.host, a.bucket, a.prefix)
    keys, total = [], 0
    for k, n in found:
        if total + n > a.max_gb * 1e9:
            break
        keys.append((k, n))
        total += n
    if not keys:
        print(json.dumps({"label": a.label, "error": f"no objects under {a.prefix!r}"}))
        return
    ptrs, bufs, torch = _buffers([n for _, n in keys])
    for rep in range(a.reps):
        row = {"label": a.label, "rep": rep + 1, "of_objects": len(found),
               "shape": "awscrt on_body memmove -> pinned, then host->GPU", **extra}  # fmt: skip
        row.update(get(c, keys, ptrs, bufs, torch))
        row["at"] = time.time()
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
