"""Settings of the remote tier: which LMCache connector, its knobs, and the crossover's inputs.

Pure module, read by deploys/settings/lmcache.py for each inference host (``r`` is its typed
reader, deploys/settings/reader.py).
Every error is one line naming host, key, value and fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploys.settings import kinds
from deploys.tier import crossover

# "lmcache": LMCache's own S3 connector (remote_url). "kvceph": kvceph's (connector/), loaded as
# an LMCache remote storage plugin.
CONNECTORS = ("lmcache", "kvceph")
# kvceph's connector by default (issue 37 item 2): LMCache's stock one records a phantom object
# on a bad status without a CRT error and can return an unwritten buffer as KV (LMCache #4483),
# keeps a lifecycle-deleted object as a hit and caches misses for the life of the process, and
# turns S3 off until a restart after three connection errors; kvceph's has none of these.
# Speed on the H200 (vLLM 0.25.1, warm from S3, medians of 3, same run): loan 9 had kvceph's
# at x1.08 / x1.20 / x1.02 the stock one's at 16k / 32k / 127k tokens (hw/h200/results/
# 2026-12-04-cmp), the gap in its fetch; loan 10 (2026-12-04-loan10) found the gap in its
# crc32c check of every GET body, run then on awscrt's event-loop threads: without it x0.95 at
# 16k and x0.92 at 32k (1.476 vs 1.557 s, 2.743 vs 2.982 s). 127k was not measured without the
# check (loan 9 with it: x1.02, spreads overlapping). The check now runs on the connector's own
# threads without the GIL and is on by default (issue 50 item 2; kvceph_connector_verify_crc32c);
# the H200 comparison with and without it at 16k / 32k / 127k is still to be made.
# Gaudi3: proven on the lab only (the lab engine runs the connector's real S3 core), not yet
# measured on Gaudi hardware.
DEFAULT_CONNECTOR = {"nvidia": "kvceph", "gaudi": "kvceph"}
# kvceph's connector: concurrent requests per worker (64 fetched slower than 16 in loan 10:
# 2.5 vs 3.7 GB/s; awscrt hands each body part to Python under the GIL), and how long one
# request may take before it counts as a miss (a 32 MiB chunk takes ~30 ms at 1 GB/s).
DEFAULT_CONNECTIONS = 16
DEFAULT_TIMEOUT_S = 5.0
MIN_TIMEOUT_S = 0.1
# Where verify.py keeps the measured figures of each cache group (crossover.py): beside the
# inventories/ and group_data/ of this kvceph checkout, the files committed together with them.
# Never relative to the directory pyinfra runs in: another working directory would render
# another crossover and roll the fleet. A relative kvceph_measured_dir is taken from here too.
CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_MEASURED_DIR = "measured"


def measured_dir(value: str) -> str:
    """``kvceph_measured_dir`` as an absolute path (relative: from the kvceph checkout)."""
    return str(CHECKOUT / value) if not value.startswith("/") else value


@dataclass(frozen=True)
class TierSettings:
    connector: str  # "lmcache" | "kvceph"
    connections: int
    timeout_s: float
    # None: GET bodies through awscrt's callback; a directory (tmpfs): CRT writes them there.
    receive_dir: str | None
    # None: the connector's own default (60 s); seconds between new CRT clients (0: never), so
    # an RGW address that failed and came back takes load again without an engine restart.
    refresh_s: int | None
    # kvceph.verify_crc32c: check each GET's body against the crc32c its PUT stored (on by
    # default; a refused body is a miss); the size is checked either way.
    verify_crc32c: bool
    # None: the crossover (measured by verify.py, else 0 = never skip); an int: fixed.
    min_hit_tokens: int | None
    # kvceph's connector: no PUT for chunks seen only in lookups below the crossover (opt-in:
    # with the DRAM tier on, a prefix it skipped can stay out of the bucket; docs/design.md).
    skip_short_puts: bool
    measured_dir: str
    # Cold prefill figures (tokens, tokens/s), fitted to t(n) = a n + b n^2 (crossover.py).
    prefill_points: tuple[tuple[int, float], ...]
    prefill_source: str
    # Filled by preflight (crossover.resolve): what lmcache.yaml gets, and where it came from.
    crossover: crossover.Crossover | None = None


def _number(value: Any) -> bool:
    """A finite number > 0 (NaN and infinity are sizes of nothing: kinds.size_problem)."""
    return kinds.size_problem(value, 0, float("inf"), "", "") is None


def prefill_points(r, accelerator: str) -> tuple[tuple[tuple[int, float], ...], str]:
    """(points, source) from ``kvceph_prefill_tokens_per_s``: one rate, or {tokens: rate}."""
    key = "kvceph_prefill_tokens_per_s"
    value = r.raw(key, None)
    if value is None:
        return crossover.DEFAULT_PREFILL[accelerator], "default"
    if _number(value):
        # One rate: prefill taken as linear (the old flat figure), measured at 16k.
        return ((crossover.FLAT_AT_TOKENS, float(value)),), key
    if isinstance(value, Mapping) and value:
        points = []
        for tokens, rate in sorted(value.items(), key=lambda kv: str(kv[0])):
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
                raise r.fail(key, value, f"length {tokens!r} is not a token count", _EXAMPLE)
            if not _number(rate):
                raise r.fail(key, value, f"rate {rate!r} at {tokens} is not > 0", _EXAMPLE)
            points.append((tokens, float(rate)))
        return tuple(sorted(points)), key
    raise r.fail(key, value, "must be a rate > 0 or {tokens: rate}", _EXAMPLE)


_EXAMPLE = "use e.g. {16384: 4100, 131072: 2440} (cold prompt tokens / TTFT at two lengths)"


def load(r, accelerator: str) -> TierSettings:
    """The remote tier's settings of one inference host."""
    connector = r.choice("kvceph_lmcache_connector", DEFAULT_CONNECTOR[accelerator], CONNECTORS)
    timeout = r.raw("kvceph_connector_timeout_s", DEFAULT_TIMEOUT_S)
    # The plugin refuses below 0.1 s when the engine starts (connector/.../settings.py), and
    # the engine then serves without the tier.
    if not _number(timeout) or not MIN_TIMEOUT_S <= timeout <= 600:
        raise r.fail(
            "kvceph_connector_timeout_s",
            timeout,
            f"must be a number in [{MIN_TIMEOUT_S}, 600]",
            "use e.g. 5.0",
        )
    points, source = prefill_points(r, accelerator)
    skip_short_puts = r.bool("kvceph_skip_short_puts", False)
    verify_crc32c = r.bool("kvceph_connector_verify_crc32c", True)
    if connector != "kvceph" and r.raw("kvceph_connector_verify_crc32c", None) is not None:
        raise r.fail(
            "kvceph_connector_verify_crc32c",
            verify_crc32c,
            f"is a setting of kvceph's connector, not {connector!r} (the stock one checks no "
            "GET body: the setting would do nothing)",
            "set kvceph_lmcache_connector: kvceph, or drop kvceph_connector_verify_crc32c",
        )
    if skip_short_puts and connector != "kvceph":
        raise r.fail(
            "kvceph_skip_short_puts",
            skip_short_puts,
            f"needs kvceph's connector, not {connector!r} (the stock one stores every chunk)",
            "set kvceph_lmcache_connector: kvceph, or drop kvceph_skip_short_puts",
        )
    return TierSettings(
        connector=connector,
        connections=r.int("kvceph_connector_connections", DEFAULT_CONNECTIONS, lo=1, hi=512),
        timeout_s=float(timeout),
        receive_dir=(
            r.path("kvceph_connector_receive_dir")
            if r.raw("kvceph_connector_receive_dir", None) is not None
            else None
        ),
        refresh_s=r.opt_int("kvceph_connector_refresh_s", lo=0, hi=3600),
        verify_crc32c=verify_crc32c,
        min_hit_tokens=r.opt_int("kvceph_min_hit_tokens", lo=0),
        skip_short_puts=skip_short_puts,
        measured_dir=measured_dir(r.str("kvceph_measured_dir", DEFAULT_MEASURED_DIR)),
        prefill_points=points,
        prefill_source=source,
    )
