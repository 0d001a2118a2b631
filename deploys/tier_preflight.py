"""Preflight of the remote tier, on the controller before any host is touched: kvceph's
connector fits the pinned LMCache, and each cache group's crossover is resolved (measured
figures read from the controller's ``kvceph_measured_dir``)."""

from __future__ import annotations

import dataclasses

from deploys.settings import HostSettings
from deploys.settings.reader import SettingsError
from deploys.tier import connector_package, crossover, measured


def check_connector(hosts: dict[str, HostSettings], build=connector_package.current) -> None:
    """Refuse, in one line, a host whose LMCache pin kvceph's connector does not support.

    + hosts: every host's settings
    + build: the wheel builder (tests pass their own)
    """
    users = [h for h in hosts.values() if h.is_inference and h.lmcache.tier.connector == "kvceph"]
    if not users:
        return
    try:
        wheel = build()
    except connector_package.PackageError as exc:
        raise SettingsError(str(exc)) from None
    for me in users:
        refusal = connector_package.lmcache_refusal(
            me.host, me.engine.profile.lmcache_version, wheel
        )
        if refusal:
            raise SettingsError(refusal)


def _load_s_per_token(me: HostSettings) -> float:
    """The configured load time per token of the whole engine (all workers)."""
    per_token = me.lmcache.kv_bytes_per_token * me.engine.tensor_parallel_size
    return per_token / (me.lmcache.load_gb_per_s * 1e9)


def resolve(hosts: dict[str, HostSettings], read=measured.read) -> dict[str, HostSettings]:
    """Every sized inference host with its group's ``Crossover`` (TierSettings.crossover).

    + hosts: every host's settings (kv_bytes_per_token resolved where it can be)
    + read: reads a group's measured file (tests pass their own)
    """
    out = dict(hosts)
    for name, me in hosts.items():
        if not me.is_inference or me.lmcache.kv_bytes_per_token is None:
            continue
        tier, e = me.lmcache.tier, me.engine
        path = measured.path_for(tier.measured_dir, e.serve_model, e.tensor_parallel_size)
        try:
            figures = read(path)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        decided = crossover.decide(
            override=tier.min_hit_tokens,
            measured=figures,
            measured_path=str(path),
            prefill_points=tier.prefill_points,
            configured_load_s_per_token=_load_s_per_token(me),
            chunk_size=me.lmcache.chunk_size,
            max_model_len=e.max_model_len,
        )
        tier = dataclasses.replace(tier, crossover=decided)
        out[name] = dataclasses.replace(me, lmcache=dataclasses.replace(me.lmcache, tier=tier))
    return out


def plan_lines(hosts: dict[str, HostSettings], groups) -> list[str]:
    """One line per cache group: the crossover it renders, and where that came from."""
    lines = []
    for g in groups:
        me = hosts[g.hosts[0]]
        decided = me.lmcache.tier.crossover
        if decided is None:
            continue
        users = [h for h in g.hosts if hosts[h].lmcache.tier.connector == "kvceph"]
        applied = (
            "kvceph.min_hit_tokens on " + ", ".join(users)
            if users
            else "not applied: the stock connector cannot skip a hit"
        )
        lines.append(
            f"kvceph: crossover of cache group {g.model} TP={g.tensor_parallel_size}: "
            f"{decided.describe()}; {applied}"
        )
    return lines
