"""Stage 1: pre-create the RGW pools (PG counts, size/min_size, application) on the admin host.

Opt-ins, per run, on the command line:
  --data kvceph_allow_data_movement=true   size changes and PG increases (they backfill data)
  --data kvceph_allow_pg_decrease=true     PG merges
  --data kvceph_adopt=pool/<name>          change a pool kvceph did not create
"""

from __future__ import annotations

from dataclasses import asdict

from pyinfra import host, logger
from pyinfra.api import OperationError, deploy

from deploys.cluster import ceph_cli, ownership
from deploys.facts import memo
from deploys.facts.ceph import CephFsid, CephOwnershipMarkers, CephPools, CephReachable
from deploys.operations import ceph
from deploys.settings import HostSettings


def min_size_one_warning(me: HostSettings) -> str | None:
    """The once-per-run warning for pools that serve I/O from a single replica."""
    ones = [p.name for p in me.ceph.pools if p.min_size == 1]
    if not ones or not me.ceph.warn_min_size_one:
        return None
    return (
        f"kvceph: pools {', '.join(ones)} have min_size 1: they keep serving I/O with a single "
        "replica, so a second failure during recovery loses writes; acceptable for a KV cache "
        "that can be recomputed (silence with kvceph_ceph_warn_min_size_one = False)"
    )


def unreachable_message(host_name: str, connect_timeout: int, probe: dict | None) -> str | None:
    """The one line that stops the Ceph stages when no mon answers, or None."""
    if probe and probe.get("reachable"):
        return None
    error = (probe or {}).get("error") or "no answer"
    return (
        f"Ceph pools: the cluster is unreachable from {host_name} within {connect_timeout}s "
        f"(ceph --connect-timeout): {error}; fix: check the mons"
    )


@deploy("Ceph pools")
def apply(me: HostSettings):
    t = ceph_cli.timeouts(me.ceph)
    # Read first, while preparing: a failed fact makes pyinfra prompt and print a traceback.
    problem = unreachable_message(
        host.name, me.ceph.connect_timeout, memo.read(host, CephReachable, **t)
    )
    if problem:
        raise OperationError(problem)
    allow_move = me.run.allow_data_movement
    allow_decrease = me.run.allow_pg_decrease
    warning = min_size_one_warning(me)
    if warning:
        logger.warning(warning)

    desired = [
        {"name": p.name, "pg_num": p.pg_num, "size": p.size, "autoscale_mode": p.autoscale_mode}
        for p in me.ceph.pools
    ]
    # Refusals are decided here too, while operations are still being prepared: with `-y`
    # pyinfra runs ops as it goes, and a refusal found only at the second pool would come
    # after the first pool was already changed.
    ceph.read_pg_budget(desired, t)
    existing = memo.read(host, CephPools, **t) or {}
    markers = memo.read(host, CephOwnershipMarkers, **t)
    if markers is None:
        raise OperationError(f"{host.name}: cannot read kvceph's markers (config-key dump)")
    fsid = memo.read(host, CephFsid, **t)
    for p in me.ceph.pools:
        ceph.plan_pool(
            existing.get(p.name),
            _wanted(p, allow_move, allow_decrease),
            owner=markers.get(ownership.marker_key("pool", p.name)),
            adopt=f"pool/{p.name}" in me.run.adopt,
            fsid=fsid,
        )

    # One budget check for the whole plan: each pool's own op sees only the pools that exist.
    ceph.pg_budget(name="Check the PG budget of the planned pools", pools=desired, **t)
    for p in me.ceph.pools:
        ceph.pool(
            name=f"Ceph pool {p.name}",
            **asdict(_wanted(p, allow_move, allow_decrease)),
            adopt=me.run.adopt,
            **t,
        )


def _wanted(p, allow_move: bool, allow_decrease: bool) -> ceph.WantedPool:
    """Pool ``p`` of the settings as the pool operation is asked for it, with the run's opt-ins."""
    return ceph.WantedPool(
        pool=p.name,
        pg_num=p.pg_num,
        size=p.size,
        min_size=p.min_size,
        application=p.application,
        allow_data_movement=allow_move,
        allow_pg_decrease=allow_decrease,
        autoscale_mode=p.autoscale_mode,
    )
