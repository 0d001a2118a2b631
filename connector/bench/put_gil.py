"""How much of the GIL kvceph's put path leaves to the caller's thread: a benchmark, not a test.

In the engine, LMCache's store hands each prefill step's chunks to the connector while the next
step runs: whatever the upload holds the GIL for is taken from vLLM's loop. This measures it on
loopback: a thread spins (the stand-in for the engine's loop) while the core puts BATCH chunks
of CHUNK_MIB each to tests/fake_s3.py (its own process), with the body copied the old way (a
slice assignment, GIL held) and the current way (ctypes.memmove, GIL released), REPS times each,
alternating. The figure per put batch: the spinner's rate / its rate with nothing else running
(1.0 = the put cost the loop nothing; the machine's cores bound it: the fake server and CRT's
threads use CPU too, so on a small or busy machine this figure is mostly CPU contention).

The direct figure, with ``--gil`` (needs py-spy on PATH and ptrace rights, e.g. root): each way
runs in a child process under ``py-spy record --gil`` (200 samples/s), and the samples where a
thread other than the caller's holds the GIL inside the body copy are counted: GIL-seconds per
GiB put, min / median / max over the reps.

    .venv/connector/bin/python connector/bench/put_gil.py [--reps 5] [--chunk-mib 64] \
        [--batch 16] [--gil]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from loopback import fake_s3  # noqa: E402 (beside this script)

from kvceph_connector import s3core  # noqa: E402
from kvceph_connector.s3core import S3Config, S3Core  # noqa: E402


def slice_readinto(self, buf) -> int:
    """The body copy before 2026-12-02: one slice assignment, with the GIL held."""
    n = min(len(buf), len(self.mv) - self.pos)
    buf[:n] = self.mv[self.pos : self.pos + n]
    self.pos += n
    if self.progress is not None:
        self.progress()
    return n


def spin_rate(work) -> tuple[float, float]:
    """The spinner's iterations per second while work() runs, and work's seconds."""
    done = [False]

    def run():
        work()
        done[0] = True

    th = threading.Thread(target=run)
    start = time.monotonic()
    th.start()
    n = 0
    while not done[0]:
        n += 1
    elapsed = time.monotonic() - start
    th.join()
    return n / elapsed, elapsed


def gil_seconds(way: str, endpoint: str, args) -> float:
    """GIL-seconds that the body copy held in one batch of puts (a child under py-spy)."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        subprocess.run(
            ["py-spy", "record", "--gil", "-r", "200", "-f", "raw", "-o", out.name, "--"]
            + [sys.executable, os.path.abspath(__file__), "--child", way, "--endpoint", endpoint]
            + ["--chunk-mib", str(args.chunk_mib), "--batch", str(args.batch)],
            check=True,
            capture_output=True,
        )
        samples = 0
        for line in open(out.name):
            stack, _, count = line.rstrip().rpartition(" ")
            if "readinto" in stack:
                samples += int(count)
    return samples / 200


def child(args) -> int:
    """One batch of puts, the body copied the given way (run under py-spy by gil_seconds)."""
    if args.child == "slice":
        s3core._Body.readinto = slice_readinto
    core = S3Core(S3Config(endpoint=args.endpoint, tls=False, connections=8))
    data = bytearray(os.urandom(1 << 20)) * args.chunk_mib
    items = [(f"bench/{args.child}/{i}", data) for i in range(args.batch)]
    ok = core.put_many(items)
    core.delete([k for k, _ in items])
    core.close()
    return 0 if all(ok) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunk-mib", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--gil", action="store_true", help="also the py-spy GIL figure")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    if args.child:
        return child(args)
    with fake_s3("bench", "bench-secret") as endpoint:
        core = S3Core(S3Config(endpoint=endpoint, tls=False, connections=8))
        data = bytearray(os.urandom(1 << 20)) * args.chunk_mib
        items = [(f"bench/{i}", data) for i in range(args.batch)]
        current = s3core._Body.readinto
        idle = statistics.median(spin_rate(lambda: time.sleep(0.5))[0] for _ in range(3))
        rows: dict[str, list[tuple[float, float]]] = {"slice (old)": [], "memmove (now)": []}
        for _ in range(args.reps):
            for name, readinto in (("slice (old)", slice_readinto), ("memmove (now)", current)):
                s3core._Body.readinto = readinto
                rate, secs = spin_rate(lambda: core.put_many(items))
                rows[name].append((rate / idle, secs))
        s3core._Body.readinto = current
        core.delete([k for k, _ in items])
        core.close()
        gil: dict[str, list[float]] = {"slice (old)": [], "memmove (now)": []}
        for _ in range(args.reps if args.gil else 0):
            gil["slice (old)"].append(gil_seconds("slice", endpoint, args))
            gil["memmove (now)"].append(gil_seconds("memmove", endpoint, args))
    gib = args.batch * args.chunk_mib / 1024
    print(f"{args.batch} x {args.chunk_mib} MiB ({gib:.2f} GiB) per batch, {args.reps} reps,")
    print(f"{os.cpu_count()} CPUs; spinner rate while putting / idle (min / median / max):")
    for name, got in rows.items():
        r = sorted(x for x, _ in got)
        s = sorted(y for _, y in got)
        print(
            f"  {name:14} {r[0]:.2f} / {statistics.median(r):.2f} / {r[-1]:.2f}"
            f"   put {statistics.median(s):.2f} s ({gib / statistics.median(s):.2f} GiB/s)"
        )
    old = statistics.median(x for x, _ in rows["slice (old)"])
    new = statistics.median(x for x, _ in rows["memmove (now)"])
    print(f"ratio now/old (median): {new / old:.2f}")
    for name, got in gil.items():
        g = sorted(x / gib for x in got)
        print(
            f"  GIL held by the body copy, {name:14} {g[0]:.3f} / {statistics.median(g):.3f}"
            f" / {g[-1]:.3f} s per GiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
