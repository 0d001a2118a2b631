"""Put admission (``kvceph.skip_short_puts``): no PUT for chunks only short lookups asked for.

A remote hit shorter than ``kvceph.min_hit_tokens`` is reported as 0 (the crossover), so chunks
written by a request with fewer chunks than that are read only when a longer request extends
them. LMCache 0.5.6 gives a remote connector no request length at put, but the same process saw
the request's chunk keys at lookup (``batched_contains`` / ``batched_async_contains``: the keys
the tiers before it did not hit). This module remembers, per key, whether it appeared in a lookup
of at least ``min_hit_chunks`` keys ("long") or only in shorter ones ("short"); a put skips a key
seen only short. A key no lookup showed (evicted here, or a rank whose process runs no lookups)
is stored: it fails open.

Torch-free, so the lab engine uses this class as the plugin does.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

#: Keys remembered (least recently looked up dropped first). What must fit is the keys looked up
#: between a request's lookup and its last store: vLLM looks a request up when it schedules it,
#: so about the prompts its GPU KV cache holds at once (an H200's ~100 GB of Qwen3-32B KV is
#: ~400k tokens, ~1,600 chunks of 256): 65,536 keys is 40 times that. Measured
#: (CPython 3.11, tracemalloc, 131,072 real-length key names): 123 bytes per key, so ~8 MB per
#: worker process at the bound. A key dropped too early is stored (fail open).
CAPACITY = 1 << 16
#: At most one INFO line with the running counts this often (seconds); every skip is DEBUG.
REPORT_EVERY_S = 60.0


class PutAdmission:
    """Which puts to skip: keys seen only in lookups shorter than the crossover.

    + min_hit_chunks: the crossover in chunks (kvceph.min_hit_tokens / chunk_size, rounded up).
    + capacity: keys remembered. + log: a logger for the running counts (None: silent).
    """

    def __init__(self, min_hit_chunks: int, capacity: int = CAPACITY, log=None):
        self.min_hit_chunks = int(min_hit_chunks)
        self.capacity = int(capacity)
        self.log = log
        # hash(key name) -> True once seen in a long lookup. The hash, not the name: about half
        # the memory (the ~110-character name would be kept alive), and a collision only stores
        # or skips one chunk wrongly, never corrupts anything.
        self._seen: OrderedDict[int, bool] = OrderedDict()
        self._lock = threading.Lock()  # lookups and puts run on different LMCache threads
        self.skipped = 0  # puts skipped since start
        self.stored = 0  # puts admitted since start
        self._reported = 0  # skipped as of the last INFO line
        self._next_report = 0.0

    @classmethod
    def when(cls, on: bool, min_hit_chunks: int, log=None) -> PutAdmission | None:
        """The admission for kvceph.skip_short_puts, or None (every full chunk stored): off,
        or a crossover under 2 chunks (every lookup is long then: nothing to skip)."""
        return cls(min_hit_chunks, log=log) if on and min_hit_chunks > 1 else None

    def looked_up(self, names: list[str]) -> None:
        """Record one lookup's keys (the ones this tier was asked about, in prefix order)."""
        long = len(names) >= self.min_hit_chunks
        with self._lock:
            for name in names:
                h = hash(name)
                seen_long = self._seen.pop(h, False)
                self._seen[h] = seen_long or long  # once long, long: a later short one can't undo
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)

    def admit(self, name: str) -> bool:
        """False for a key seen only in short lookups (skip its put); True otherwise."""
        with self._lock:
            short = self._seen.get(hash(name)) is False
            if short:
                self.skipped += 1
            else:
                self.stored += 1
        if short and self.log is not None:
            self.log.debug("kvceph: %s seen only in lookups below the crossover: not stored", name)
        self._report()
        return not short

    def _report(self) -> None:
        now = time.monotonic()
        skipped, stored = self.skipped, self.stored
        if self.log is None or now < self._next_report or skipped == self._reported:
            return
        self._next_report = now + REPORT_EVERY_S
        self._reported = skipped
        self.log.info(
            "kvceph: skip_short_puts since start: skipped %d, stored %d (skipped: seen only in "
            "lookups of fewer than %d chunks)",
            skipped,
            stored,
            self.min_hit_chunks,
        )
