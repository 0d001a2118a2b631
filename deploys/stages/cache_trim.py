"""The S3 tier's trim timer on the Ceph admin host: each cache group's oldest objects go when
the group nears its share of the quota (deploys/cluster/cache_trim.py, docs/capacity.md)."""

from __future__ import annotations

from pyinfra import logger

from deploys.cluster import cache_trim, capacity
from deploys.operations import files as kvfiles
from deploys.operations import timer
from deploys.preflight import Preflight
from deploys.settings import HostSettings


def apply(me: HostSettings, checked: Preflight) -> None:
    """Install and start the trim timer; nothing without a quota or cache groups (an
    unbounded cache has no share to keep)."""
    quota = checked.quota
    if quota is None or quota.max_size is None or not checked.users:
        return
    each = cache_trim.share(quota.max_size, len(checked.users))
    rate, _ = capacity.fleet(checked.hosts.values())
    warning = cache_trim.interval_line(each, rate)
    if warning:
        logger.warning(warning)
    reload = "timeout 120 systemctl daemon-reload"
    kvfiles.atomic_file(
        name=f"Cache trim unit {cache_trim.SERVICE_PATH} ({len(checked.users)} group(s), "
        f"each {each / 2**30:.1f} GiB)",
        path=cache_trim.SERVICE_PATH,
        content=cache_trim.service_text(
            me.s3.bucket, checked.users, quota.max_size, me.s3.admin_user
        ),
        on_change=reload,
    )
    kvfiles.atomic_file(
        name=f"Cache trim timer {cache_trim.TIMER_PATH} (every {cache_trim.INTERVAL_MIN} min)",
        path=cache_trim.TIMER_PATH,
        content=cache_trim.timer_text(),
        on_change=reload,
    )
    timer.started(
        name=f"{cache_trim.UNIT}.timer running and enabled", unit=f"{cache_trim.UNIT}.timer"
    )
