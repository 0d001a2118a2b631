#!/usr/bin/env python3
"""Serve S3 from the first N radosgw behind haproxy: the others are disabled through haproxy's
runtime API (no reload, so the engine's open connections stay up).

    rgwscale.py SOCKET N TOTAL
"""

import socket
import sys


def command(path: str, line: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(line.encode() + b"\n")
        return s.makefile().read().strip()


def main(path: str, n: int, total: int) -> None:
    for i in range(1, total + 1):
        verb = "enable" if i <= n else "disable"
        out = command(path, f"{verb} server rgw/gw{i}")
        if out:
            raise SystemExit(f"haproxy: {verb} gw{i}: {out}")
    state = command(path, "show servers state rgw")
    up = [f[3] for f in (ln.split() for ln in state.splitlines()[2:]) if len(f) > 6 and f[6] == "0"]
    print(f"haproxy serves from {len(up)} radosgw: {' '.join(up)}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
