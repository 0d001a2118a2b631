#!/usr/bin/env python3
"""Bucket chores for the H200 run, path-style to ENDPOINT with keys from env AK/SK.

s3util.py ENDPOINT mkbucket|stat|clear BUCKET      (prints one JSON line)
"""

import json
import os
import sys

import boto3
from botocore.config import Config


def client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=os.environ["AK"],
        aws_secret_access_key=os.environ["SK"],
        region_name="default",
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"max_attempts": 3},
        ),
    )


def objects(s3, bucket: str) -> list[dict]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [o for p in pages for o in p.get("Contents", ())]


def main(endpoint: str, op: str, bucket: str) -> dict:
    s3 = client(endpoint)
    if op == "mkbucket":
        s3.create_bucket(Bucket=bucket)
        return {"buckets": [b["Name"] for b in s3.list_buckets()["Buckets"]]}
    found = objects(s3, bucket)
    if op == "stat":
        return {"objects": len(found), "bytes": sum(o["Size"] for o in found)}
    if op == "clear":
        keys = [o["Key"] for o in found]
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        return {"deleted": len(keys), "left": len(objects(s3, bucket))}
    raise SystemExit(f"unknown op {op}")


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
