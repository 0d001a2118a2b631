"""kvceph's connector core (connector/, kvceph_connector.s3core) against the lab's real RGW.

Two peers (tests/integration/connector_peer.py), each its own process with its own awscrt client
as two inference hosts would be, talk virtual-hosted S3 to ceph1's haproxy -> RGW: one over https
(the lab CA), one over plain http. They share the lab with the other Pacific tests; the S3 user
and bucket are this module's own (``kvconn-``), removed at the end. Faults a real RGW will not do
on demand (slow, truncated, corrupt bodies) are in connector/tests/test_s3core.py on loopback.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import (
    CA_BUNDLE,
    S3_ADMIN_URL,
    S3_HOST,
    path_style_client,
    ssh,
    start_rgw,
)

PEER = Path(__file__).with_name("connector_peer.py")
DNS = "s3.kvlab"  # lab/README.md: rgw_dns_name of the Pacific lab
MIB = 1 << 20


@pytest.fixture(scope="module")
def world(lab, tmp_path_factory):
    """An S3 user and bucket of this module, and an /etc/hosts for the peers' namespace."""
    name = f"kvconn-{secrets.token_hex(3)}"
    user = json.loads(
        ssh("ceph1", f"radosgw-admin user create --uid={name} --display-name={name}").stdout
    )
    keys = user["keys"][0]
    admin = path_style_client(S3_ADMIN_URL, keys["access_key"], keys["secret_key"])
    admin.create_bucket(Bucket=name)
    hosts = tmp_path_factory.mktemp("conn") / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{S3_HOST} {DNS} {name}.{DNS}\n")
    yield {"bucket": name, "keys": keys, "hosts": hosts, "admin": admin}
    # A new client: the old one's pooled connections died with the RGWs the last test killed
    # (boto waits out its timeouts and retries on them: ~20 s).
    admin = path_style_client(S3_ADMIN_URL, keys["access_key"], keys["secret_key"])
    left = admin.list_objects_v2(Bucket=name).get("Contents", [])
    if left:
        admin.delete_objects(Bucket=name, Delete={"Objects": [{"Key": o["Key"]} for o in left]})
    # The bucket goes with its user, in the background: right after the RGWs the last test
    # killed came back, a DeleteBucket took ~21 s here (measured), for nothing the tests need.
    ssh(
        "ceph1",
        f"nohup radosgw-admin user rm --uid={name} --purge-data >/dev/null 2>&1 &",
        check=False,
    )


class Peer:
    """A connector core in its own process (see connector_peer.py)."""

    def __init__(self, world, tls: bool, connections: int = 16, secret: str | None = None):
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": world["keys"]["access_key"],
            "AWS_SECRET_ACCESS_KEY": secret or world["keys"]["secret_key"],
        }
        # A private mount namespace: its /etc/hosts names the RGW, this machine's is untouched.
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
            + ['mount --bind "$1" /etc/hosts && exec "$2" "$3"', "sh"]
            + [str(world["hosts"]), sys.executable, str(PEER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        port = 443 if tls else 80
        self.endpoint = f"{world['bucket']}.{DNS}:{port}"
        config = {
            "endpoint": self.endpoint,
            "tls": tls,
            "connections": connections,
            "timeout_s": 5.0,
            "ca_file": CA_BUNDLE if tls else None,
        }
        assert self.send({"config": config})["result"] == "ready"

    def send(self, cmd: dict) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"peer died: {self.proc.stderr.read()[-3000:]}")
        return json.loads(line)

    def __getattr__(self, op):
        return lambda **kw: self.send({"op": op, **kw})

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def https(world):
    peer = Peer(world, tls=True)
    yield peer
    peer.close()


@pytest.fixture(scope="module")
def http(world):
    peer = Peer(world, tls=False)
    yield peer
    peer.close()


def chunk_key(i: int, tag: str = "") -> str:
    # LMCache's naming: model@world_size@worker_id@chunk_hash@dtype (model path has slashes)
    return f"/var/lib/kvceph/models/Qwen/Qwen3-32B/kvconn{tag}@2@0@{i:x}@bfloat16"


def test_byte_exact_over_https_and_http(world, https, http):
    items = [[chunk_key(i, "x"), i, 3 * MIB + i] for i in range(8)] + [
        [chunk_key(99), 99, 20 * MIB]
    ]
    assert https.put(items=items)["result"] == [True] * 9
    got = http.get(items=items)
    assert got["result"] == ["exact"] * 9, got
    assert http.lookup(keys=[k for k, _, _ in items])["result"] == [n for _, _, n in items]
    # Written over http, read over https; the object names are LMCache's ('/' -> '_').
    assert http.put(items=[[chunk_key(7, "y"), 7, MIB]])["result"] == [True]
    assert https.get(items=[[chunk_key(7, "y"), 7, MIB]])["result"] == ["exact"]
    listed = world["admin"].list_objects_v2(Bucket=world["bucket"], Prefix="_var_lib")
    assert "_var_lib_kvceph_models_Qwen_Qwen3-32B_kvconny@2@0@7@bfloat16" in [
        o["Key"] for o in listed["Contents"]
    ]
    head = world["admin"].head_object(
        Bucket=world["bucket"], Key="_var_lib_kvceph_models_Qwen_Qwen3-32B_kvconny@2@0@7@bfloat16"
    )
    assert head["Metadata"]["kvceph-size"] == str(MIB)
    assert head["Metadata"]["kvceph-crc32c"].isdigit()
    assert https.delete(keys=[k for k, _, _ in items])["result"] == [True] * 9
    assert https.lookup(keys=[chunk_key(0, "x")])["result"] == [None]


def test_a_chunk_written_after_a_miss_is_found(https, http):
    key = chunk_key(1, "late")
    assert https.lookup(keys=[key])["result"] == [None]
    assert http.put(items=[[key, 5, 2 * MIB]])["result"] == [True]
    assert https.lookup(keys=[key])["result"] == [2 * MIB]
    assert https.get(items=[[key, 5, 2 * MIB]])["result"] == ["exact"]
    # Deleted by the other host: no longer a hit either (nothing positive is cached).
    assert http.delete(keys=[key])["result"] == [True]
    assert https.lookup(keys=[key])["result"] == [None]


def test_a_batch_of_lookups_answers_every_key(https):
    keys = [chunk_key(i, "c") for i in range(64)]
    assert https.put(items=[[k, 1, 4096] for k in keys])["result"] == [True] * 64
    # 64 HEADs in flight together against a real RGW, each answer matched to its own key. That
    # they run at once is proven on loopback (connector/tests/test_s3core.py: the server counts
    # its requests in flight); a wall-clock ratio here measured the lab's 2 cores, not the
    # connector (CI, 2026-12-02: 0.08 s together vs 0.14 s one by one fired a 0.5 bound).
    missing = chunk_key(99, "c")
    got = https.lookup(keys=keys[:32] + [missing] + keys[32:])
    assert got["result"] == [4096] * 32 + [None] + [4096] * 32
    assert got["log"] == []
    https.delete(keys=keys)


def test_403_and_404_are_misses_with_one_line(world, https):
    key = chunk_key(2, "f")
    assert https.put(items=[[key, 2, MIB]])["result"] == [True]
    wrong = Peer(world, tls=True, secret="not-the-" + secrets.token_hex(8))
    try:
        got = wrong.lookup(keys=[key, chunk_key(3, "f")])
        assert got["result"] == [None, None]
        assert len(got["log"]) == 1 and "2 of 2 misses (403)" in got["log"][0], got
        got = wrong.get(items=[[key, 2, MIB]])
        assert got["result"] == ["miss"]
        assert len(got["log"]) == 1 and "1 of 1 misses (403)" in got["log"][0], got
    finally:
        wrong.close()
    # A lookup said yes, the object went away before the GET: a miss, one line.
    https.delete(keys=[key])
    got = https.get(items=[[key, 2, MIB]])
    assert got["result"] == ["miss"]
    assert len(got["log"]) == 1 and "1 of 1 misses (404)" in got["log"][0], got
    # A plain lookup miss is no warning.
    assert https.lookup(keys=[key])["log"] == []


def test_a_cut_upload_is_never_a_hit(world, https):
    """RGW makes an object visible only once its body is complete (single PUT and multipart)."""
    key = chunk_key(4, "cut")
    name = key.replace("/", "_")
    url = world["admin"].generate_presigned_url(
        "put_object", Params={"Bucket": world["bucket"], "Key": name}, ExpiresIn=300
    )
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=10) as sock:
        head = (
            f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Length: {4 * MIB}\r\n\r\n"
        )
        sock.sendall(head.encode() + b"k" * (2 * MIB))
    time.sleep(1)  # RGW notices the closed connection
    assert https.lookup(keys=[key])["result"] == [None]
    assert https.get(items=[[key, 0, 4 * MIB]])["result"] == ["miss"]
    # A multipart upload with its parts but no CompleteMultipartUpload: not an object yet.
    admin, bucket = world["admin"], world["bucket"]
    up = admin.create_multipart_upload(Bucket=bucket, Key=name)
    admin.upload_part(
        Bucket=bucket, Key=name, UploadId=up["UploadId"], PartNumber=1, Body=b"p" * (5 * MIB)
    )
    assert https.lookup(keys=[key])["result"] == [None]
    admin.abort_multipart_upload(Bucket=bucket, Key=name, UploadId=up["UploadId"])


def test_rgw_stopped_mid_read_is_misses_then_the_tier_comes_back(world, https):
    items = [[chunk_key(i, "mid"), 100 + i, 8 * MIB] for i in range(32)]
    put = https.put(items=items)
    assert put["result"] == [True] * 32, put["log"]
    slow = Peer(world, tls=True, connections=1)  # one GET at a time: the stop lands mid-read
    try:
        slow.proc.stdin.write(json.dumps({"op": "get", "items": items}) + "\n")
        slow.proc.stdin.flush()
        time.sleep(0.1)
        # Both daemons die at once (SIGKILL: no draining); systemd restarts them (on-failure).
        ssh("ceph1", "systemctl kill -s KILL kvlab-rgw@gw1 kvlab-rgw@gw2")
        got = json.loads(slow.proc.stdout.readline())
        assert "WRONG" not in got["result"]
        assert "miss" in got["result"], f"the read finished before the stop: {got['s']:.2f} s"
        assert got["log"] and all("misses" in line for line in got["log"]), got["log"]
        assert len(got["log"]) <= 3, got["log"]
    finally:
        start_rgw()  # waits until S3 answers again
    # No breaker stays open: the same core finds and reads the chunks again by itself.
    deadline = time.monotonic() + 30
    while slow.lookup(keys=[items[0][0]])["result"] != [8 * MIB]:
        assert time.monotonic() < deadline, "the core did not come back after RGW did"
        time.sleep(1)
    assert slow.get(items=items[:4])["result"] == ["exact"] * 4
    slow.close()
    https.delete(keys=[k for k, _, _ in items])
