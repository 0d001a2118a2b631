#!/usr/bin/env python3
"""Raw S3 read rate from the RGW setup with awscrt, the client LMCache 0.5.6 uses.

    getbench.py HOST:PORT BUCKET MAX_GB [TARGET_GBPS]      (env: HOME, AWS_PROFILE as the engine's)

GETs the bucket's objects (up to MAX_GB) all at once, the way LMCache's S3 connector does, with
the cache probe's client and GET path (deploys/remote/s3probe.py: an ``S3Client`` on LMCache's
default settings, no throughput target, so awscrt sizes its connection pool for 10 Gb/s;
virtual-host ``Host`` header, TLS off). TARGET_GBPS sets ``throughput_target_gbps`` instead, to
see whether the client or the server is the limit. Prints one JSON line.
"""

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout (or the pack)
from deploys.remote import s3probe  # noqa: E402


def main(host: str, bucket: str, max_gb: float, target: float | None) -> dict:
    b = boto3.Session(profile_name="lmcache").client("s3", endpoint_url=f"http://{host}")
    found = [
        o
        for p in b.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in p.get("Contents", ())
    ]
    keys, sizes = [], []
    for o in sorted(found, key=lambda o: o["Key"]):
        if sum(sizes) >= max_gb * 1e9:
            break
        keys.append(o["Key"])
        sizes.append(o["Size"])
    worker = s3probe.Worker(
        SimpleNamespace(
            endpoint=f"{bucket}.{host}",
            region="default",
            io_threads=64,  # LMCache's s3_num_io_threads default
            prefer_http2=False,
            disable_tls=True,
            throughput_target_gbps=target,
        )
    )
    buffers = [bytearray(n) for n in sizes]
    t = time.perf_counter()
    s3probe.get_all(worker, keys, buffers)
    dt = time.perf_counter() - t
    got = sum(len(buf) for buf in buffers)
    return {
        "objects": len(keys),
        "bytes": got,
        "s": round(dt, 3),
        "GBps": round(got / dt / 1e9, 3),
        "throughput_target_gbps": target or "default (10)",
    }


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(main(a[0], a[1], float(a[2]), float(a[3]) if len(a) > 3 else None)))
