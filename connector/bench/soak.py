"""Does the S3 core hold on to anything? A soak benchmark, not a test.

Runs many requests through one S3Core against tests/fake_s3.py on loopback (in its own process,
so its threads are not counted here), with the client refreshed every ``--refresh-s`` (the
engine's default is 60 s; shorter here, so a few minutes stand for hours), and samples this
process's threads, open fds and RSS after every round. Before issue 50 every request kept
awscrt's request object alive and every refreshed client that served traffic kept its threads
(+41 threads and +127 fds per refresh at 16 connections); now the figures stay flat.

    .venv/connector/bin/python connector/bench/soak.py [--rounds 1000] [--batch 32] \
        [--chunk-kib 256] [--connections 16] [--refresh-s 0.5] [--src <connector/src>]

Prints one line per figure: at start (after the first round), at the end, and min / median /
max over every round's sample; then the requests sent and the refreshes done.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# --src <checkout>/connector/src: soak another checkout's core (e.g. one before the fix).
SRC = (
    sys.argv[sys.argv.index("--src") + 1]
    if "--src" in sys.argv
    else os.path.join(HERE, "..", "src")
)
sys.path.insert(0, SRC)

from loopback import fake_s3  # noqa: E402 (beside this script)

from kvceph_connector.s3core import S3Config, S3Core  # noqa: E402


def sample() -> tuple[int, int, float]:
    """(threads, open fds, RSS MiB) of this process, awscrt's native threads included."""
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    return (
        len(os.listdir("/proc/self/task")),
        len(os.listdir("/proc/self/fd")),
        rss_pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20),
    )


def one_round(core: S3Core, keys: list[str], data: bytes, put: bool) -> int:
    """Lookups and GETs of every key (PUTs too when put): the requests sent."""
    n = len(data)
    if put:
        assert all(core.put_many([(k, data) for k in keys])), "puts failed"
    assert core.lookup(keys, n) == [n] * len(keys), "lookups missed"
    assert all(core.get_many_into([(k, bytearray(n), n) for k in keys])), "gets missed"
    return len(keys) * (3 if put else 2)


def main() -> None:
    """Run the soak and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32, help="objects per round")
    ap.add_argument("--chunk-kib", type=int, default=256)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--refresh-s", type=float, default=0.5)
    ap.add_argument("--src", default=SRC, help="the connector's src directory to import")
    args = ap.parse_args()
    with fake_s3("KVSOAK", "kvsoak") as endpoint:
        core = S3Core(
            S3Config(
                endpoint=endpoint,
                tls=False,
                connections=args.connections,
                refresh_s=args.refresh_s,
            )
        )
        refreshes, real_refresh = [], core._refresh_client
        core._refresh_client = lambda: refreshes.append(1) or real_refresh()  # counted
        keys = [f"soak@1@0@{i:08x}@bfloat16" for i in range(args.batch)]
        data = os.urandom(args.chunk_kib << 10)
        sent = one_round(core, keys, data, put=True)
        start, samples = sample(), []
        began = time.monotonic()
        for i in range(args.rounds):
            sent += one_round(core, keys, data, put=i % 10 == 0)
            gc.collect()
            samples.append(sample())
        took = time.monotonic() - began
        alive = core.clients_alive() if hasattr(core, "clients_alive") else "?"
        core.close()
    print(
        f"soak: {args.rounds} rounds of {args.batch} x {args.chunk_kib} KiB, "
        f"{args.connections} connections, refresh every {args.refresh_s} s: {sent} requests, "
        f"{len(refreshes)} refreshes in {took:.0f} s; clients alive at the end {alive}"
    )
    for i, (name, fmt) in enumerate((("threads", ".0f"), ("fds", ".0f"), ("RSS MiB", ".1f"))):
        column = [s[i] for s in samples]
        print(
            f"{name:8} start {start[i]:{fmt}}  end {samples[-1][i]:{fmt}}  min / median / max "
            f"{min(column):{fmt}} / {statistics.median(column):{fmt}} / {max(column):{fmt}}"
        )


if __name__ == "__main__":
    main()
