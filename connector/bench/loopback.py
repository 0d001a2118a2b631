"""The benchmarks' S3: tests/fake_s3.py on loopback, in a child process of its own (so its
threads, fds and GIL are not the measured process's)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = """
import sys
sys.path.insert(0, {tests!r})
from fake_s3 import FakeS3
s = FakeS3(0).start()
print(s.endpoint, flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def fake_s3(access_key: str, secret_key: str) -> Iterator[str]:
    """The endpoint of a fake S3 that serves for the ``with`` block, then stops.

    + access_key / secret_key: the AWS_* defaults the core signs with (the fake takes any)
    """
    os.environ.setdefault("AWS_ACCESS_KEY_ID", access_key)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", secret_key)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(tests=os.path.join(HERE, "..", "tests"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield server.stdout.readline().strip()
    finally:
        server.stdin.close()
        server.wait(10)
