"""One S3 connector core in its own process, driven over stdin/stdout (test_s3_connector.py).

Each peer is a separate process with its own awscrt client, as two inference hosts are. The test
starts it in a private mount namespace whose /etc/hosts names the lab's RGW, so the virtual-hosted
endpoint "<bucket>.s3.kvlab" resolves without touching this machine's /etc/hosts.

stdin: one JSON object per line: {"config": {...S3Config fields}} first, then commands
{"op": "lookup", "keys": [...]}, {"op": "put", "items": [[key, seed, size], ...]},
{"op": "get", "items": [[key, seed, size], ...]}, {"op": "delete", "keys": [...]}.
stdout: one JSON line per command: {"result": ..., "log": [warning lines since the last one],
"s": seconds}. A get's result per item: "exact" (checked and byte-equal to the seed's data),
"miss", or "WRONG" (the core said yes but the bytes differ: never acceptable).
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "connector" / "src"))

from kvceph_connector.s3core import S3Config, S3Core  # noqa: E402


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def payload(seed: int, size: int) -> bytes:
    """The deterministic body of an object (both peers compute it)."""
    return random.Random(seed).randbytes(size)


def main() -> int:
    lines = _Lines()
    logging.getLogger("kvceph_connector").addHandler(lines)
    logging.getLogger("kvceph_connector").setLevel(logging.INFO)
    first = json.loads(sys.stdin.readline())
    core = S3Core(S3Config(**first["config"]))
    print(json.dumps({"result": "ready", "log": [], "s": 0}), flush=True)
    for raw in sys.stdin:
        cmd = json.loads(raw)
        lines.lines.clear()
        started = time.monotonic()
        op = cmd["op"]
        if op == "lookup":
            result = core.lookup(cmd["keys"])
        elif op == "put":
            result = core.put_many([(k, payload(s, n)) for k, s, n in cmd["items"]])
        elif op == "get":
            bufs = [bytearray(n) for _, _, n in cmd["items"]]
            ok = core.get_many_into(
                [(k, b, n) for (k, _, n), b in zip(cmd["items"], bufs, strict=True)]
            )
            result = [
                ("exact" if b == payload(s, n) else "WRONG") if good else "miss"
                for (_, s, n), b, good in zip(cmd["items"], bufs, ok, strict=True)
            ]
        elif op == "delete":
            result = core.delete(cmd["keys"])
        else:
            result = f"unknown op {op}"
        out = {"result": result, "log": list(lines.lines), "s": time.monotonic() - started}
        print(json.dumps(out), flush=True)
    core.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
