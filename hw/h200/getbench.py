#!/usr/bin/env python3
"""Raw S3 read rate from the RGW setup with awscrt, the client LMCache 0.5.6 uses.

    getbench.py HOST:PORT BUCKET MAX_GB [TARGET_GBPS]      (env: HOME, AWS_PROFILE as the engine's)

GETs the bucket's objects (up to MAX_GB) all at once, the way LMCache's S3 connector does: an
``S3Client`` on its default settings (LMCache passes no throughput target; awscrt then sizes its
connection pool for 10 Gb/s), virtual-host ``Host`` header, TLS off. TARGET_GBPS sets
``throughput_target_gbps`` instead, to see whether the client or the server is the limit.
Prints one JSON line.
"""

import json
import sys
import time
from urllib.parse import quote

import boto3
from awscrt import auth, io, s3
from awscrt.http import HttpHeaders, HttpRequest


def main(host: str, bucket: str, max_gb: float, target: float | None) -> dict:
    b = boto3.Session(profile_name="lmcache").client("s3", endpoint_url=f"http://{host}")
    found = [
        o
        for p in b.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in p.get("Contents", ())
    ]
    keys, total = [], 0
    for o in sorted(found, key=lambda o: o["Key"]):
        if total >= max_gb * 1e9:
            break
        keys.append(o["Key"])
        total += o["Size"]
    elg = io.EventLoopGroup(64)  # LMCache's s3_num_io_threads default
    boot = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
    creds = auth.AwsCredentialsProvider.new_default_chain(boot)
    extra = {"throughput_target_gbps": target} if target else {}
    client = s3.S3Client(
        bootstrap=boot, region="default", tls_mode=s3.S3RequestTlsMode.DISABLED, **extra
    )
    got = [0]

    def on_body(chunk, offset, **kw):
        got[0] += len(chunk)

    t = time.perf_counter()
    reqs = []
    for k in keys:
        h = HttpHeaders()
        h.add("Host", f"{bucket}.{host}")
        reqs.append(
            s3.S3Request(
                client=client,
                type=s3.S3RequestType.GET_OBJECT,
                request=HttpRequest("GET", "/" + quote(k), h),
                on_body=on_body,
                credential_provider=creds,
                region="default",
            )
        )
    for r in reqs:
        r.finished_future.result(timeout=600)
    dt = time.perf_counter() - t
    return {
        "objects": len(keys),
        "bytes": got[0],
        "s": round(dt, 3),
        "GBps": round(got[0] / dt / 1e9, 3),
        "throughput_target_gbps": target or "default (10)",
    }


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(main(a[0], a[1], float(a[2]), float(a[3]) if len(a) > 3 else None)))
