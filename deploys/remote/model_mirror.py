#!/usr/bin/env python3
"""kvceph model mirror helper: the sha256 manifest, the push into the mirror, the pull from it.

Uploaded by the deploy and run on the hosts; keys are read from a private INI file (the same
shape as s3admin.py's), never from the command line:

    [s3]
    endpoint = https://s3.example:443
    region = default
    access_key = ...
    secret_key = ...

Subcommands:
    manifest DIR                                    print DIR's manifest (JSON)
    push --config INI --bucket B --prefix P DIR     upload DIR's files, then its manifest (boto3)
    pull --config INI --bucket B --prefix P DEST    download, check against the manifest, rename
                                                    into DEST (stdlib only: any python3)

The manifest lists every file's relative path, size and sha256 (a multipart upload's ETag is
not an MD5, so ETags prove nothing). It is written last, both in the mirror and in DEST: its
presence means "complete". A pull downloads into DEST.partial and renames it into place, so a
host never serves a half-staged model. One-line errors on stderr, exit status 1.
"""

import argparse
import configparser
import datetime
import hashlib
import hmac
import json
import os
import shutil
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

MANIFEST = "kvceph-manifest.json"
BLOCK = 1 << 20
TIMEOUT = 60
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


class Failure(Exception):
    """A one-line error for the operator."""


# --- Manifest ------------------------------------------------------------------------------------


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(BLOCK), b""):
            h.update(chunk)
    return h.hexdigest()


def build_manifest(directory):
    """Every regular file of a model directory: relative path, size, sha256 (sorted)."""
    files = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            if name.startswith(".") or rel == MANIFEST or not os.path.isfile(path):
                continue
            files.append({"path": rel, "size": os.path.getsize(path), "sha256": file_sha256(path)})
    files.sort(key=lambda f: f["path"])
    if not any(f["path"] == "config.json" for f in files):
        raise Failure(f"{directory} has no config.json: not a model directory")
    return {"version": 1, "files": files}


def manifest_text(manifest):
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def parse_manifest(text):
    """Parse and check a manifest: plain relative paths, a size and a sha256 for each file."""
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise Failure(f"manifest is not JSON: {exc}") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not files or manifest.get("version") != 1:
        raise Failure("manifest has no version 1 file list")
    for f in files:
        path = f.get("path") if isinstance(f, dict) else None
        parts = path.split("/") if isinstance(path, str) else [""]
        if any(part in ("", ".", "..") for part in parts) or parts[0] == MANIFEST:
            raise Failure(f"manifest path {path!r} is not a plain relative path")
        sha = str(f.get("sha256"))
        size = f.get("size")
        if (
            not isinstance(size, int)
            or size < 0
            or len(sha) != 64
            or set(sha) - set("0123456789abcdef")
        ):
            raise Failure(f"manifest entry {path} lacks a size or a sha256")
    if not any(f["path"] == "config.json" for f in files):
        raise Failure("manifest lists no config.json: not a model directory")
    return manifest


# --- S3 ------------------------------------------------------------------------------------------


def load_config(path):
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path) as handle:
            parser.read_file(handle)
        section = parser["s3"]
        return {
            "endpoint": section["endpoint"].rstrip("/"),
            "region": section.get("region") or "default",
            "access_key": section["access_key"],
            "secret_key": section["secret_key"],
        }
    except (OSError, configparser.Error, KeyError) as exc:
        raise Failure(f"cannot read the mirror keys from {path}: {exc}") from None


def _tls_context(endpoint):
    if not endpoint.startswith("https://"):
        return None
    bundle = next((p for p in SYSTEM_BUNDLES if os.path.isfile(p)), None)
    return ssl.create_default_context(cafile=bundle)


def signed_get(config, bucket, key):
    """GET s3://bucket/key (path-style, AWS Signature V4, unsigned payload): the response."""
    parts = urllib.parse.urlsplit(config["endpoint"])
    path = "/" + urllib.parse.quote(f"{bucket}/{key}", safe="/-_.~")
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - hosts may run < 3.11
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = "UNSIGNED-PAYLOAD"
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        ["GET", path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, payload]
    )
    scope = f"{day}/{config['region']}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key_bytes = ("AWS4" + config["secret_key"]).encode()
    for part in (day, config["region"], "s3", "aws4_request"):
        key_bytes = hmac.new(key_bytes, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(f"{parts.scheme}://{parts.netloc}{path}")
    request.add_header("Host", parts.netloc)
    request.add_header("x-amz-content-sha256", payload)
    request.add_header("x-amz-date", amz_date)
    request.add_header(
        "Authorization",
        f"AWS4-HMAC-SHA256 Credential={config['access_key']}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}",
    )
    where = f"s3://{bucket}/{key} at {config['endpoint']}"
    try:
        return urllib.request.urlopen(
            request, timeout=TIMEOUT, context=_tls_context(config["endpoint"])
        )
    except urllib.error.HTTPError as exc:
        code = exc.code
        if code == 404:
            raise Failure(f"{where} does not exist") from None
        raise Failure(f"GET {where}: HTTP {code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Failure(f"cannot reach the mirror for {where}: {exc}") from None


# --- Pull ----------------------------------------------------------------------------------------


def _download(config, bucket, prefix, entry, tmp):
    target = os.path.join(tmp, *entry["path"].split("/"))
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    h, size = hashlib.sha256(), 0
    with signed_get(config, bucket, prefix + entry["path"]) as response, open(target, "wb") as out:
        for chunk in iter(lambda: response.read(BLOCK), b""):
            h.update(chunk)
            size += len(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    if size != entry["size"] or h.hexdigest() != entry["sha256"]:
        raise Failure(
            f"{entry['path']}: {size} bytes with sha256 {h.hexdigest()[:12]}... differ from the "
            f"manifest's {entry['size']} bytes, {entry['sha256'][:12]}...; the mirror is damaged"
        )
    os.chmod(target, 0o644)
    return size


def pull(config, bucket, prefix, dest, jobs):
    """Stage the model under ``dest`` (idempotent: a complete ``dest`` is left alone)."""
    if os.path.isfile(os.path.join(dest, MANIFEST)):
        print(f"{dest} is staged")
        return
    with signed_get(config, bucket, prefix + MANIFEST) as response:
        text = response.read().decode()
    manifest = parse_manifest(text)
    tmp = dest.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)  # an interrupted pull starts over
    os.makedirs(os.path.dirname(tmp), mode=0o755, exist_ok=True)
    os.makedirs(tmp, mode=0o755)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        sizes = list(
            pool.map(lambda f: _download(config, bucket, prefix, f, tmp), manifest["files"])
        )
    with open(os.path.join(tmp, MANIFEST), "w") as out:
        out.write(text)
    os.chmod(os.path.join(tmp, MANIFEST), 0o644)
    if os.path.exists(dest):
        shutil.rmtree(dest)  # a directory without a manifest is an incomplete copy
    os.rename(tmp, dest)
    print(f"pulled {len(sizes)} files, {sum(sizes)} bytes into {dest}")


# --- Push (on the Ceph admin host: boto3 does the multipart uploads) ----------------------------


def push(config, bucket, prefix, source):
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    manifest = build_manifest(source)
    text = manifest_text(manifest)
    client = boto3.client(
        "s3",
        endpoint_url=config["endpoint"],
        verify=next((p for p in SYSTEM_BUNDLES if os.path.isfile(p)), None)
        if config["endpoint"].startswith("https://")
        else None,
        region_name=config["region"],
        aws_access_key_id=config["access_key"],
        aws_secret_access_key=config["secret_key"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
    )
    try:
        try:
            current = client.get_object(Bucket=bucket, Key=prefix + MANIFEST)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise
            current = None
        if current is not None:
            if current.decode() == text:
                print(f"s3://{bucket}/{prefix} already holds this model")
                return
            raise Failure(
                f"s3://{bucket}/{prefix} holds a different manifest; a revision never changes: "
                "mirror the new weights under their own revision"
            )
        for entry in manifest["files"]:
            client.upload_file(
                os.path.join(source, *entry["path"].split("/")), bucket, prefix + entry["path"]
            )
        client.put_object(Bucket=bucket, Key=prefix + MANIFEST, Body=text.encode())
    except (ClientError, BotoCoreError) as exc:
        raise Failure(f"push to s3://{bucket}/{prefix} failed: {exc}") from None
    print(f"pushed {len(manifest['files'])} files to s3://{bucket}/{prefix}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="model_mirror.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    sub.required = True
    show = sub.add_parser("manifest")
    show.add_argument("directory")
    for name in ("push", "pull"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--config", required=True)
        cmd.add_argument("--bucket", required=True)
        cmd.add_argument("--prefix", required=True)
        cmd.add_argument("directory")
        if name == "pull":
            cmd.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "manifest":
            sys.stdout.write(manifest_text(build_manifest(args.directory)))
        elif args.command == "push":
            push(load_config(args.config), args.bucket, args.prefix, args.directory)
        else:
            pull(load_config(args.config), args.bucket, args.prefix, args.directory, args.jobs)
    except Failure as exc:
        sys.stderr.write(f"model mirror: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
