"""PURE: how much the cache may hold (the S3 quota) and how soon the fleet fills it.

LMCache stores every full chunk of every new prefix, and the lifecycle expires objects by age,
not by use: nothing but a quota bounds what the engines write. Qwen3-32B in bf16 is 256 KiB of
KV per token; an H200 prefilling ~4,000 new tokens/s writes ~1 GB/s, ~90 TB a day (issue 36):
one busy engine can fill a shared cluster within days, and a full cluster stops every tenant.
So a deploy always has a quota (``kvceph_s3_quota_max_size_gb``, else derived here from the data
pool's MAX AVAIL), or the operator says in one key that it has none.

RGW counts a quota in the objects' own bytes (``check_on_raw`` off), and ``ceph df``'s MAX AVAIL
is already what the pool can still store after replication: both are logical bytes. The raw
figure (x the pool's size) is printed beside them, as that is what the cluster loses.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploys.tier import kv_sizing

GIB = 1024**3
DAY_S = 86400
# The share of the data pool's MAX AVAIL a derived quota takes. MAX AVAIL is what every tenant
# of the pool can still write before the fullest OSD reaches the full ratio; a cache that may
# take a fifth of it leaves the rest to the others and to recovery, and is still days of a busy
# engine's writes on a cluster sized for it (the plan prints how many).
DEFAULT_FRACTION = 0.2
# The pool RGW writes object data to in the default zone; the first configured pool whose name
# ends like this is taken instead (another zone: <zone>.rgw.buckets.data).
DATA_POOL_SUFFIX = ".rgw.buckets.data"
DEFAULT_DATA_POOL = "default" + DATA_POOL_SUFFIX


@dataclass(frozen=True)
class Quota:
    """The quota a deploy sets on the engines' RGW user (bytes; None: unbounded)."""

    max_size: int | None
    source: str  # the plan's words for where the figure comes from
    set_now: bool = True  # False: the user keeps the quota it has


def data_pool(pool_names: list[str]) -> str:
    """The pool RGW stores the bucket's objects in: the configured one, else the default."""
    return next((p for p in pool_names if p.endswith(DATA_POOL_SUFFIX)), DEFAULT_DATA_POOL)


def derived(max_avail: int, fraction: float) -> int:
    """``fraction`` of a pool's MAX AVAIL, rounded down to whole MiB (RGW keeps bytes)."""
    return int(max_avail * fraction) // 2**20 * 2**20


def decide(
    explicit_gb: float | None,
    unbounded: bool,
    fraction: float,
    current: dict | None,
    pool: str,
    df: dict | None,
) -> Quota:
    """The user's quota this deploy sets or keeps; ValueError (one line, no host) when none.

    + explicit_gb: ``kvceph_s3_quota_max_size_gb`` (GiB), None when not set
    + unbounded: ``kvceph_s3_quota_unbounded``
    + fraction: ``kvceph_s3_quota_fraction``
    + current: the user's ``user_quota`` as RGW reports it (None: no user yet)
    + pool: the data pool's name
    + df: ``CephDf``'s answer ({pool: {"max_avail": bytes, "size"...}, "_raw_avail": bytes})

    A derived quota is derived once: the user keeps it on later deploys (MAX AVAIL shrinks as
    the cluster fills; re-deriving would shrink the quota on every run and roll nothing in).
    """
    if explicit_gb is not None:
        return Quota(int(explicit_gb * GIB), "kvceph_s3_quota_max_size_gb")
    if unbounded:
        return Quota(None, "kvceph_s3_quota_unbounded: nothing bounds what the engines write")
    current = current or {}
    if current.get("enabled") and int(current.get("max_size", -1)) > 0:
        return Quota(
            int(current["max_size"]),
            "kept: the user's quota (derived at the first deploy; set "
            "kvceph_s3_quota_max_size_gb to change it)",
            set_now=False,
        )
    stats = (df or {}).get(pool)
    if stats and stats.get("max_avail", 0) > 0:
        avail, where = (
            int(stats["max_avail"]),
            f"pool {pool}'s MAX AVAIL {size(stats['max_avail'])}",
        )
    elif df and df.get("_raw_avail", 0) > 0:
        # The pool does not exist yet (this run's pools stage creates it): the cluster's raw
        # space over the pool's replication, as MAX AVAIL would be without the full ratio.
        replicas = max(1, int((df.get("_sizes") or {}).get(pool) or 1))
        avail = int(df["_raw_avail"]) // replicas
        where = (
            f"the cluster's raw avail {size(df['_raw_avail'])} / size {replicas} ({pool} is new)"
        )
    else:
        raise ValueError(
            f"kvceph_s3_quota_max_size_gb = None: no quota would bound the cache and {pool}'s "
            "MAX AVAIL could not be read (`ceph df`); fix: set kvceph_s3_quota_max_size_gb, or "
            "kvceph_s3_quota_unbounded = True to run without one"
        )
    return Quota(derived(avail, fraction), f"{fraction:.0%} of {where} (kvceph_s3_quota_fraction)")


def write_rate(engines: list[tuple[float, int]]) -> float:
    """The fleet's worst-case write rate in bytes/s: every engine prefilling new tokens only.

    + engines: (prefill tokens/s, KV bytes per token of the whole model) per engine

    LMCache writes the KV of every full chunk it computes; a prompt that misses is prefilled at
    the engine's cold rate, so this is what the cache gains per second at worst.
    """
    return float(sum(rate * kv for rate, kv in engines))


def days_to_full(quota: int, rate: float, expiration_days: int) -> float | None:
    """Days until the quota is full at ``rate`` bytes/s, or None when the lifecycle keeps the
    cache below it (objects expire ``expiration_days`` after they were written)."""
    if rate <= 0:
        return None
    days = quota / rate / DAY_S
    return None if days >= expiration_days else days


def plan_line(quota: Quota, rate: float, engines: int, replicas: int, expiration: int) -> str:
    """The plan's one line: the quota, the fleet's write rate, and when it is full."""
    per_day = rate * DAY_S
    writes = (
        f"{engines} engine(s) write at most {size(rate)}/s ({size(per_day)}/day, "
        f"{size(per_day * replicas)}/day raw at size {replicas})"
    )
    if quota.max_size is None:
        return f"kvceph: S3 quota: none ({quota.source}); {writes}"
    head = f"kvceph: S3 quota {size(quota.max_size)} ({quota.source}); {writes}"
    days = days_to_full(quota.max_size, rate, expiration)
    if days is None:
        return (
            f"{head}: never full (the {expiration}-day lifecycle keeps at most "
            f"{size(per_day * expiration)})"
        )
    return (
        f"{head}: full in {duration(days)}, before the {expiration}-day lifecycle frees "
        "anything; then engines recompute what they cannot store (kvceph_s3_quota_max_size_gb)"
    )


def duration(days: float) -> str:
    """Days as the plan prints them: days, else hours, else minutes."""
    if days >= 1:
        return f"{days:.1f} days"
    if days * 24 >= 1:
        return f"{days * 24:.1f} hours"
    return f"{max(1, round(days * 1440))} min"


def is_full(used: int, objects: int, quota: int) -> bool:
    """Whether RGW refuses the next chunk: less than two objects' worth of the quota left.

    LMCache's objects are chunks of one size, so the average object is the next write; RGW
    refuses a PUT that would pass the quota, and its two gateways' caches can overshoot it.
    """
    if quota <= 0 or objects <= 0:
        return False
    return quota - used < 2 * used / objects


def size(n: float) -> str:
    """Bytes as the plan prints them (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fleet(hosts) -> tuple[float, int]:
    """(worst-case write rate in bytes/s, engines) over every inference host's engines.

    + hosts: HostSettings of the inventory, KV sizes resolved (preflight)
    """
    engines = []
    for h in hosts:
        if not h.is_inference or not h.lmcache.kv_bytes_per_token:
            continue
        per_token = h.lmcache.kv_bytes_per_token * h.engine.tensor_parallel_size
        engines += [(h.lmcache.prefill_tokens_per_s, per_token)] * len(h.engine.engines)
    return write_rate(engines), len(engines)


def plan(admin, hosts, user: dict | None, df: dict | None) -> tuple[Quota, str]:
    """The quota this run sets or keeps, and the plan's line; ValueError (one line) when none.

    + admin: the Ceph admin host's settings (pools, S3 settings)
    + hosts: every host's settings
    + user: the engines' user as ``RgwUser`` reads it (None: not created yet)
    + df: ``CephDf``'s answer (None: not read)
    """
    s3 = admin.s3
    pools = {p.name: p for p in (admin.ceph.pools if admin.ceph else ())}
    pool = data_pool(list(pools))
    replicas = (pools[pool].size if pool in pools else None) or 3  # Ceph's default size
    df = dict(df or {}, _sizes={pool: replicas}) if df else None
    try:
        quota = decide(
            s3.quota_max_size_gb,
            s3.quota_unbounded,
            s3.quota_fraction,
            (user or {}).get("user_quota"),
            pool,
            df,
        )
    except ValueError as exc:
        raise ValueError(f"{admin.host}: {exc}") from None
    dram = fleet_dram(hosts)
    rate, engines = fleet(hosts)
    line = plan_line(quota, rate, engines, replicas, s3.expiration_days)
    if s3.quota_max_size_gb is not None and quota.max_size < dram:
        # Every chunk is written to S3 behind the DRAM tier: a quota below the DRAM the fleet
        # holds keeps less than the engines' buffers, so cross-node hits are mostly lost. Said
        # on every plan, not refused: a small quota is how the lab tests a full bucket
        # (tests/integration/test_18_capacity.py), and engines keep serving when it is full.
        line += (
            f"; WARNING: kvceph_s3_quota_max_size_gb = {s3.quota_max_size_gb!r}: "
            f"{size(quota.max_size)} is below the {size(dram)} the fleet's DRAM buffers hold "
            "(kvceph_lmcache_max_local_cpu_size x workers x engines): the S3 tier holds less "
            f"than the caches in front of it; fix: give at least {dram / GIB:.1f} GiB"
        )
    return quota, line


def fleet_dram(hosts) -> int:
    """Bytes of every inference host's DRAM buffers (per worker x workers x engines).

    + hosts: HostSettings of the inventory, KV sizes resolved (preflight)
    """
    total = 0.0
    for h in hosts:
        if not h.is_inference or not h.lmcache.kv_bytes_per_token:
            continue
        per_worker = kv_sizing.limits(h).max_local_cpu_size * GIB
        total += per_worker * h.engine.tensor_parallel_size * len(h.engine.engines)
    return int(total)
