"""What the GET crc32c check costs: a micro-benchmark, not a test.

1. CPU per GiB: awscrt's crc32c over a ``--mib`` buffer, thread CPU time, ``--reps`` times.
2. awscrt's completion callback (``on_done``: the time CRT's event-loop thread spends in the
   core's code when a GET ends, during which that thread serves no other connection) and the
   batch's wall time, GETs of ``--batch`` x ``--chunk-mib`` from tests/fake_s3.py (its own
   process) on loopback, three ways, alternating: the check off; on, on the core's check
   threads (the default); and on inside the callback (where it ran before issue 50).

    .venv/connector/bin/python connector/bench/crc_cost.py [--reps 5] [--mib 256] \
        [--batch 16] [--chunk-mib 32]

Every figure: min / median / max over the reps (callbacks: over every GET of every rep).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from loopback import fake_s3  # noqa: E402 (beside this script)

from kvceph_connector.s3core import S3Config, S3Core, crc32c  # noqa: E402


class Inline:
    """A stand-in for the check threads that runs the check in the caller: the callback."""

    def submit(self, fn, *args):
        fn(*args)

    def shutdown(self, wait=True):
        pass


def spread(values: list[float], scale: float = 1.0, fmt: str = ".3f") -> str:
    """'min / median / max' of values x scale."""
    v = [x * scale for x in values]
    return f"{min(v):{fmt}} / {statistics.median(v):{fmt}} / {max(v):{fmt}}"


def cpu_per_gib(mib: int, reps: int) -> list[float]:
    """Thread CPU seconds per GiB of crc32c, one figure per rep."""
    buf = os.urandom(mib << 20)
    out = []
    for _ in range(reps):
        t0 = time.thread_time()
        crc32c(buf)
        out.append((time.thread_time() - t0) * 1024 / mib)
    return out


def get_run(core: S3Core, keys: list[str], size: int, way: str) -> tuple[float, list[float]]:
    """One batch of GETs: (wall seconds, each on_done's seconds in the core)."""
    real_checks = core._checks
    core._checks = {"off": None, "threads": real_checks, "callback": Inline()}[way]
    took: list[float] = []
    lock = threading.Lock()
    real = S3Core._on_done

    def timed(op, **kw):
        t0 = time.perf_counter()
        real(core, op, **kw)
        with lock:
            took.append(time.perf_counter() - t0)

    core._on_done = timed
    try:
        t0 = time.perf_counter()
        ok = core.get_many_into([(k, bytearray(size), size) for k in keys])
        wall = time.perf_counter() - t0
    finally:
        core._checks, core._on_done = real_checks, real.__get__(core)
    assert all(ok), f"{way}: GETs missed"
    return wall, took


def main() -> None:
    """Run both parts and print their figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--chunk-mib", type=int, default=32)
    args = ap.parse_args()
    cpu = cpu_per_gib(args.mib, args.reps)
    print(
        f"crc32c CPU: s per GiB {spread(cpu)} (GiB/s {spread([1 / c for c in cpu], fmt='.1f')}), "
        f"{args.reps} x {args.mib} MiB, {os.cpu_count()} cores"
    )
    with fake_s3("KVBENCH", "kvbench") as endpoint:
        core = S3Core(S3Config(endpoint=endpoint, tls=False, connections=16, timeout_s=30))
        size = args.chunk_mib << 20
        keys = [f"crc@1@0@{i:08x}@bfloat16" for i in range(args.batch)]
        assert all(core.put_many([(k, os.urandom(size)) for k in keys])), "puts failed"
        ways = ("off", "threads", "callback")
        walls: dict[str, list[float]] = {w: [] for w in ways}
        calls: dict[str, list[float]] = {w: [] for w in ways}
        get_run(core, keys, size, "off")  # warm the connections
        for _ in range(args.reps):
            for way in ways:
                wall, took = get_run(core, keys, size, way)
                walls[way].append(wall)
                calls[way] += took
        core.close()
    gib = args.batch * size / (1 << 30)
    print(f"GETs: {args.reps} reps x {args.batch} x {args.chunk_mib} MiB on loopback, 16 conns")
    for way, name in zip(ways, ("check off", "check on threads", "check in callback"), strict=True):
        print(
            f"  {name:18} on_done ms {spread(calls[way], 1e3)}  batch s {spread(walls[way])}"
            f"  GiB/s {spread([gib / w for w in walls[way]], fmt='.2f')}"
        )


if __name__ == "__main__":
    main()
