"""Manage Ceph pools, orchestrator service specs and host labels through the ``ceph`` CLI."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, OperationError, QuoteString, StringCommand, operation

from deploys import specs
from deploys.cluster import ceph_cli, ownership
from deploys.cluster.ceph_cli import DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, ceph
from deploys.facts import memo
from deploys.facts.ceph import (
    CephConfigDump,
    CephConfigValue,
    CephFsid,
    CephOrchHosts,
    CephOsdStat,
    CephOwnershipMarkers,
    CephPools,
    CephServiceSpec,
)
from deploys.operations import files, orch_readback
from deploys.operations.orch_readback import spec_differences  # noqa: F401 (s3_tier, tests use it here)

# OSDMonitor::check_pg_num divides by at least 3 OSDs ("num_in_osds 3" on a 2-OSD cluster).
MIN_OSDS_IN_PG_LIMIT = 3
OPT_IN_DATA_MOVEMENT = "--data kvceph_allow_data_movement=true"
OPT_IN_PG_DECREASE = "--data kvceph_allow_pg_decrease=true"
# The monitor options the PG budget reads (``read_pg_budget``).
PG_BUDGET_OPTIONS = (("mon", "mon_max_pg_per_osd"), ("mon", "osd_pool_default_size"))


class Refused(OperationError):
    """kvceph will not make this change without an opt-in (or at all); one-line reason."""


def _int_config(who: str, option: str, timeouts: dict) -> int:
    raw = memo.read(host, CephConfigValue, who=who, option=option, **timeouts)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise OperationError(
            f"ceph config get {who} {option} returned {raw!r}, not a number"
        ) from None


def plan_pg_budget(
    pools: dict, desired: list[dict], max_per_osd: int, num_in_osds: int, default_size: int
) -> str:
    """Check ``desired`` against the monitors' PG limit; a summary line, or Refused.

    Mirrors OSDMonitor's check: sum of pg_num_target x size over all pools, against
    mon_max_pg_per_osd x max(in OSDs, 3). Pools the autoscaler owns (and keeps: a desired
    ``autoscale_mode`` other than "on" takes them from it) keep their PG count. A plan
    that adds nothing never refuses, even on a cluster already over the limit.
    """
    current = {n: p["pg_num_target"] * p["size"] for n, p in pools.items()}
    projected = dict(current)
    changes = []
    for want in desired:
        have = pools.get(want["name"])
        size = want.get("size") or (have["size"] if have else default_size)
        mode = want.get("autoscale_mode") or (have["autoscale_mode"] if have else "on")
        pg = have["pg_num_target"] if have and mode == "on" else want["pg_num"]
        projected[want["name"]] = pg * size
        if projected[want["name"]] != current.get(want["name"]):
            changes.append(f"{want['name']} {pg} PGs x size {size}")
    osds = max(num_in_osds, MIN_OSDS_IN_PG_LIMIT)
    limit, total = max_per_osd * osds, sum(projected.values())
    arithmetic = f"mon_max_pg_per_osd {max_per_osd} x {osds} OSDs"
    if total > limit and total > sum(current.values()):
        raise Refused(
            f"PG budget: {', '.join(changes)} would bring the cluster to {total} PG replicas, "
            f"over the monitors' limit {limit} ({arithmetic}; Ceph counts at least 3 OSDs) and "
            "Ceph would refuse with ERANGE; fix: lower pg_num/size in kvceph_ceph_pools, add "
            "OSDs, or raise mon_max_pg_per_osd"
        )
    return f"PG budget: {total} of {limit} PG replicas ({arithmetic})"


def read_pg_budget(desired: list[dict], timeouts: dict) -> str:
    """plan_pg_budget on the cluster's facts (pools, OSDs, mon_max_pg_per_osd, default size)."""
    existing = memo.read(host, CephPools, **timeouts)
    stat = memo.read(host, CephOsdStat, **timeouts)
    if existing is None or stat is None:
        raise OperationError("cannot read the pools or OSD count from the cluster")
    max_per_osd, default_size = (_int_config(w, o, timeouts) for w, o in PG_BUDGET_OPTIONS)
    return plan_pg_budget(existing, desired, max_per_osd, stat["num_in_osds"], default_size)


@operation(is_idempotent=True)
def pg_budget(
    pools: list[dict],
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Refuse, before any pool is touched, a pool plan the monitors would reject with ERANGE.

    + pools: the desired pools, ``[{"name": ..., "pg_num": ..., "size": ...}]`` (size None:
      the cluster's osd_pool_default_size)
    + connect_timeout / command_timeout: seconds for each ``ceph`` call

    Only reads; raises Refused (an OperationError) with the arithmetic when the plan does not
    fit.

    **Example:**

    .. code:: python

        ceph.pg_budget(pools=[{"name": "default.rgw.buckets.data", "pg_num": 2048, "size": 2}])
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    host.noop(read_pg_budget(pools, t))
    yield from ()  # a check: reads facts, never changes the cluster


@dataclass(frozen=True)
class WantedPool:
    """One pool as :func:`pool` is asked for it (its arguments), what :func:`plan_pool` plans."""

    #: the pool's name
    pool: str
    #: wanted PG count (compared against pg_num_target)
    pg_num: int
    #: replicas, and replicas needed to serve I/O (None: leave as is)
    size: int | None = None
    min_size: int | None = None
    #: application to enable (e.g. ``rgw``)
    application: str | None = None
    #: the run's opt-ins: changes that backfill data (size, PG increase), PG merges
    allow_data_movement: bool = False
    allow_pg_decrease: bool = False
    #: ``pg_autoscale_mode`` (None: leave the pool's)
    autoscale_mode: str | None = None


def plan_pool(
    have: dict | None,
    want: WantedPool,
    owner: str | None = ownership.CREATED,
    adopt: bool = False,
    fsid: str | None = None,
    now: str = "",
) -> tuple[list[list], list[str]]:
    """The ``ceph`` argument lists that bring pool ``have`` to ``want``, and notes for the
    operator. Raises Refused, naming every reason.

    + have: the pool's CephPools entry (None: missing)
    + want: the wanted pool
    + owner: the pool's kvceph marker (None: kvceph did not create it, so any change is refused
      unless ``adopt``); a record or a bare state (deploys/cluster/ownership.py)
    + adopt: the operator's kvceph_adopt names ``pool/<name>``
    + fsid: the cluster's fsid: a marker written goes in as a record (state, fsid, digest of the
      pool asked for, ``now``); one that records another cluster takes nothing over. As for a
      service, the digest is recorded, not compared: kvceph changes its pools (size, pg_num)
    + now: the time a written marker records (UTC, ISO 8601)

    ``autoscale_mode`` (None: leave it) is set at creation, so the autoscaler never sees the
    pool in its own mode, and before any pg_num step on an existing pool."""
    key = ownership.marker_key("pool", want.pool)

    def marker(state: str) -> list:
        """The marker step (``ownership.marker_value``: a record where the fsid is known)."""
        asked = {"pool": want.pool, "type": "replicated", "application": want.application}
        value = ownership.marker_value(state, fsid, ownership.digest(asked), now)
        return ["config-key", "set", key, value]

    if have is None:
        # `osd pool create` exits 0 with "already exists" on a pool it did not create, so the
        # decision is the fact, never its exit status. Size goes in at creation: the monitor's
        # PG check then counts the real size, and no replicas are made only to be dropped.
        create: list = ["osd", "pool", "create", want.pool, want.pg_num, want.pg_num, "replicated"]
        if want.size is not None:
            create += ["--size", want.size]
        if want.autoscale_mode is not None:
            create += ["--autoscale-mode", want.autoscale_mode]
        steps = [create]
        if want.min_size is not None:
            steps.append(["osd", "pool", "set", want.pool, "min_size", want.min_size])
        if want.application:
            steps.append(["osd", "pool", "application", "enable", want.pool, want.application])
        return steps + [marker(ownership.CREATED)], []
    stale = (parsed := ownership.parse(owner)) and ownership.mismatch(
        key, parsed, fsid, None, f"pool {want.pool}"
    )
    if stale:
        raise Refused(stale.replace("<kind>/<name>", f"pool/{want.pool}"))

    if have["type"] != "replicated":
        raise Refused(
            f"pool {want.pool}: is {have['type']}, kvceph wants replicated and Ceph cannot change "
            "a pool's type; fix: migrate and delete the pool by hand, or use another pool name"
        )
    refusals: list[str] = []
    notes: list[str] = []
    steps: list[list] = []

    def opted_in(allowed: bool, step: list, change: str, opt_in: str) -> None:
        """A change that moves data: a step with the run's opt-in ``allowed``, else a refusal."""
        if allowed:
            steps.append(step)
        else:
            refusals.append(f"{change}; opt in with {opt_in}")

    new_size = want.size if want.size is not None else have["size"]
    if want.min_size is not None and want.min_size > new_size:
        refusals.append(f"min_size {want.min_size} exceeds size {new_size}")
    set_min = want.min_size is not None and want.min_size != have["min_size"]
    if set_min and want.min_size < have["min_size"]:
        # Lowering first keeps min_size <= size at every step when size also drops.
        steps.append(["osd", "pool", "set", want.pool, "min_size", want.min_size])
        set_min = False
    if want.size is not None and want.size != have["size"]:
        opted_in(
            want.allow_data_movement,
            ["osd", "pool", "set", want.pool, "size", want.size],
            f"size {have['size']} -> {want.size} moves data (backfill)",
            OPT_IN_DATA_MOVEMENT,
        )
    if set_min:
        steps.append(["osd", "pool", "set", want.pool, "min_size", want.min_size])

    # pg_num_target, not pg_num: Ceph walks pg_num there in steps, and a pool mid-split is
    # already converged as far as kvceph is concerned.
    target = have["pg_num_target"]
    mode = have["autoscale_mode"]
    if want.autoscale_mode is not None and want.autoscale_mode != mode:
        steps.append(["osd", "pool", "set", want.pool, "pg_autoscale_mode", want.autoscale_mode])
        mode = want.autoscale_mode
    if mode == "on":
        if want.pg_num != target:
            notes.append(
                f"pg_autoscale_mode is on: the autoscaler owns pg_num ({target}, wanted "
                f"{want.pg_num}); set kvceph_ceph_autoscale_mode = 'off' to pin it"
            )
    elif want.pg_num > target:
        opted_in(
            want.allow_data_movement,
            ["osd", "pool", "set", want.pool, "pg_num", want.pg_num],
            f"pg_num {target} -> {want.pg_num} splits PGs and moves data",
            OPT_IN_DATA_MOVEMENT,
        )
    elif want.pg_num < target:
        opted_in(
            want.allow_pg_decrease,
            ["osd", "pool", "set", want.pool, "pg_num", want.pg_num],
            f"pg_num {target} -> {want.pg_num} merges PGs and moves data",
            OPT_IN_PG_DECREASE,
        )
    if want.pg_num == target and have["pg_num"] != target:
        notes.append(f"pg_num {have['pg_num']} is still moving to {target}")

    if want.application and want.application not in have["applications"]:
        if have["applications"]:
            refusals.append(
                f"already used by application {', '.join(have['applications'])}; Ceph wants "
                f"--yes-i-really-mean-it to add {want.application}: do it by hand if intended"
            )
        else:
            steps.append(["osd", "pool", "application", "enable", want.pool, want.application])

    if refusals:
        raise Refused(f"pool {want.pool}: refused: {'; '.join(refusals)}")
    if steps and owner is None:
        if not adopt:
            wanted = ", ".join(f"`ceph {' '.join(map(str, s))}`" for s in steps)
            raise Refused(
                f"pool {want.pool}: exists and kvceph did not create it (no marker); kvceph would "
                f"run {wanted}; nothing was changed; fix: --data "
                f"{ownership.ADOPT_KEY}=pool/{want.pool} to hand it over, or use another pool name"
            )
        steps.append(marker(ownership.ADOPTED))
    return steps, notes


@operation(is_idempotent=True)
def pool(
    pool: str,
    pg_num: int,
    size: int | None = None,
    min_size: int | None = None,
    application: str | None = None,
    allow_data_movement: bool = False,
    allow_pg_decrease: bool = False,
    autoscale_mode: str | None = None,
    adopt: tuple[str, ...] = (),
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Create a replicated pool, or bring an existing one to the wanted parameters.

    + pool: pool name
    + pg_num: wanted PG count (compared against pg_num_target: big pools split in steps)
    + size / min_size: replicas, and replicas needed to serve I/O (None: leave as is)
    + application: application to enable (e.g. ``rgw``)
    + allow_data_movement: permit changes that backfill data (size change, PG increase)
    + allow_pg_decrease: permit PG merges (pg_num decrease)
    + autoscale_mode: ``pg_autoscale_mode`` (off/warn/on; None: leave the pool's)
    + adopt: objects the operator handed over for this run (``kvceph_adopt``, ``pool/<name>``)
    + connect_timeout / command_timeout: seconds for each ``ceph`` call

    min_size and the application are safe to fix in place. A size change or PG increase moves
    data and needs ``allow_data_movement``; a decrease needs ``allow_pg_decrease``; a pool of
    another type is refused (Ceph cannot convert it); a pool kvceph did not create (no
    marker, deploys/cluster/ownership.py) is not changed unless ``adopt`` names it. With
    ``pg_autoscale_mode on`` the autoscaler owns pg_num and this operation says so instead of
    fighting it. Refusals raise
    Refused (an OperationError) and nothing of the pool is changed.

    **Example:**

    .. code:: python

        ceph.pool(pool="default.rgw.buckets.index", pg_num=64, application="rgw")
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    pools = memo.read(host, CephPools, **t)
    if pools is None:
        raise OperationError(f"pool {pool}: cannot read the cluster's pools")
    markers = memo.read(host, CephOwnershipMarkers, **t)
    if markers is None:
        raise OperationError(f"pool {pool}: cannot read kvceph's markers")
    want = WantedPool(
        pool, pg_num, size, min_size, application, allow_data_movement, allow_pg_decrease,
        autoscale_mode,
    )  # fmt: skip
    steps, notes = plan_pool(
        pools.get(pool),
        want,
        markers.get(ownership.marker_key("pool", pool)),
        f"pool/{pool}" in adopt,
        fsid=memo.read(host, CephFsid, **t),
        now=_utc_now(),
    )
    for args in steps:
        yield ceph(*args, **t, json=False)
    if not steps:
        host.noop(f"pool {pool} is as wanted" + "".join(f"; {n}" for n in notes))


@operation(is_idempotent=True)
def service_spec(
    spec: str,
    secret_spec: dict | None = None,
    adopt: tuple[str, ...] = (),
    wait: int = orch_readback.DEFAULT_WAIT,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Apply an orchestrator service spec (``ceph orch apply -i``) when the service differs, and
    read it back: the orchestrator must export it and run all its daemons within ``wait``.

    + spec: the spec (one service, deploys/specs.py's layout), without secrets
    + secret_spec: keys under the spec's ``spec:`` whose values are secrets, e.g.
      ``{"ssl_key": Secret(...)}``: added to the uploaded file only (0600, removed after the
      apply), compared with the cluster's by sha256 (``ceph_cli.redacted``), never shown
    + adopt: objects the operator handed over for this run (``kvceph_adopt``)
    + wait: seconds to wait for the service to converge after the apply
    + connect_timeout / command_timeout: seconds for each ``ceph`` call

    A service kvceph did not create (no marker, deploys/cluster/ownership.py) is refused unless
    ``adopt`` names it; then its spec is merged (realm, zone, SSL, placement kept), each
    difference logged, and it is marked ``adopted``. A new service is marked ``created``.

    Compares only the keys the spec sets against ``ceph orch ls --export``: the orchestrator
    adds its own defaults (``rgw_exit_timeout_secs: 120`` on 20.2), which must not read as
    drift. ``orch apply`` can exit 0 for a refused spec, so its output and the read-back
    decide: a refusal, or a service that never appears or never runs, fails with the cluster's
    words.

    **Example:**

    .. code:: python

        ceph.service_spec(spec=specs.rgw_spec(me.rgw))
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    wanted = copy.deepcopy(spec)
    service_name = wanted.get("service_name") or (
        f"{wanted['service_type']}.{wanted['service_id']}"
    )
    secret_spec = secret_spec or {}
    for key, value in secret_spec.items():
        wanted.setdefault("spec", {})[key] = ceph_cli.secret_hash(value.reveal())
    current = memo.read(host, CephServiceSpec, service_name=service_name, **t)
    markers = memo.read(host, CephOwnershipMarkers, **t)
    if markers is None:
        raise OperationError(f"service {service_name}: cannot read kvceph's markers")
    fsid = memo.read(host, CephFsid, **t)
    plan = ownership.plan_service(
        {**wanted, "service_name": service_name}, current, markers, adopt, fsid
    )
    if plan.refusal:
        raise Refused(f"{plan.refusal}; fix: --data {ownership.ADOPT_KEY}={service_name}")
    applied = plan.spec
    if plan.merged:
        # Adopted: the cluster's spec with kvceph's keys merged in (ownership.merge_spec).
        for line in plan.differences:
            logger.warning("kvceph: %s: adopting: %s", service_name, line)
        hashed = [k for k in ceph_cli.SECRET_SPEC_KEYS if k in applied.get("spec", {})]
        if [k for k in hashed if k not in secret_spec]:
            raise Refused(
                f"service {service_name}: its {', '.join(hashed)} is kept but kvceph reads "
                "only its hash; fix: give kvceph the same key (kvceph_rgw_ingress_ssl_pem)"
            )
    if current is not None:
        diffs = spec_differences(applied, current)
        if not diffs:
            host.noop(f"service {service_name} already has this spec")
            if plan.marker:
                yield _marker(service_name, plan.marker, t, fsid, applied)
            return
    upload = copy.deepcopy(applied if plan.merged else spec)
    for key in secret_spec:
        upload.get("spec", {}).pop(key, None)
    remote = host.get_temp_filename(f"kvceph-spec-{service_name}")
    text = specs.dump(upload)
    if secret_spec:
        full = copy.deepcopy(upload)
        full.setdefault("spec", {}).update({k: v.reveal() for k, v in secret_spec.items()})
        text = specs.dump(full)
        # An existing file keeps its mode when uploaded over (SFTP as root, or sudo's cp),
        # and under sudo the upload passes only through the login user's private directory:
        # the key is never readable by another user.
        yield StringCommand("install", "-m", "600", "/dev/null", QuoteString(remote))
        yield from files.upload(text.encode(), remote)
    else:
        yield FileUploadCommand(StringIO(text), remote)
    yield orch_readback.apply_command(remote, service_name, applied, t, wait)
    if plan.marker:
        yield _marker(service_name, plan.marker, t, fsid, applied)


def _marker(service_name: str, value: str, t: dict, fsid: str | None, spec: dict) -> StringCommand:
    """A service's marker as a record: its state, the cluster, the applied spec's digest (the
    bare state when the fsid could not be read)."""
    record = ownership.marker_value(value, fsid, ownership.digest(spec), _utc_now())
    return marker_command("service", service_name, record, t)


def _utc_now() -> str:
    """The time a marker records (UTC, ISO 8601, seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def marker_command(kind: str, name: str, value: str, t: dict) -> StringCommand:
    """``ceph config-key set kvceph/owned/<kind>/<name> <value>`` (deploys/cluster/ownership.py)."""
    return ceph("config-key", "set", ownership.marker_key(kind, name), value, **t, json=False)


@operation()
def ownership_marker(
    kind: str,
    object_name: str,
    value: str,
    fsid: str | None = None,
    spec_digest: str | None = None,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Record that kvceph owns an object it created (or the operator handed over): the state,
    the cluster's fsid, the digest of what kvceph asked for, and the time. A marker that
    already records this state, fsid and digest stands; a bare one (before issue 52) is
    rewritten as a record.

    + kind: the marker's kind (``ownership.S3_USER``, ``ownership.BUCKET``, ...)
    + object_name: the object's name (a uid, a bucket)
    + value: ``ownership.CREATED`` or ``ownership.ADOPTED``
    + fsid: the cluster's fsid (``facts.ceph.CephFsid``; None: not recorded)
    + spec_digest: ``ownership.digest`` of what kvceph asked for (None: not recorded)
    + connect_timeout / command_timeout: seconds for each ``ceph`` call

    A kvceph operation (pyinfra has none for the config-key store): the stage that creates
    the object calls it right after, with the value ``ownership.plan_object`` chose.

    .. code:: python

        ceph.ownership_marker(kind="s3-user", object_name="lmcache", value="created")
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    markers = memo.read(host, CephOwnershipMarkers, **t)
    current = ownership.parse((markers or {}).get(ownership.marker_key(kind, object_name)))
    if current is not None and (current.fsid, current.digest) == (fsid, spec_digest):
        host.noop(f"{kind} {object_name} is marked {current.state}")
        return
    state = current.state if current is not None else value
    if fsid is None and spec_digest is None:
        # Nothing to tell this object from a later one (the fsid unread): the bare state.
        yield marker_command(kind, object_name, state, t)
        return
    yield marker_command(
        kind, object_name, ownership.record(state, fsid, spec_digest, _utc_now()), t
    )


@operation()
def ownership_marker_removed(
    kind: str,
    object_name: str,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Remove kvceph's marker of an object kvceph retired, right after its removal: a marker
    that outlived its object would take over a same-named one someone creates later.

    + kind / object_name: as in :func:`ownership_marker`
    + connect_timeout / command_timeout: seconds for each ``ceph`` call
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    key = ownership.marker_key(kind, object_name)
    if key not in (memo.read(host, CephOwnershipMarkers, **t) or {}):
        host.noop(f"{kind} {object_name} has no kvceph marker")
        return
    yield ceph("config-key", "rm", key, **t, json=False)


@operation()
def service_restart(
    service_name: str,
    wait: int = orch_readback.DEFAULT_WAIT,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Restart every daemon of an orchestrator service one at a time (``ceph orch daemon
    restart``), each started again and running before the next.

    + service_name: e.g. ``rgw.standard``
    + wait: seconds to wait for the daemons
    + connect_timeout / command_timeout: seconds for each ``ceph`` call

    Callers decide whether a restart is due (``_if=``); this operation always restarts.
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    yield orch_readback.restart_command(service_name, t, wait)


def read_option_plan(
    section: str, option: str, value: str, adopt: tuple[str, ...], timeouts: dict
) -> ownership.OptionPlan:
    """:func:`ownership.plan_option` on the cluster's config database and kvceph's markers."""
    dump = memo.read(host, CephConfigDump, options=(option,), **timeouts)
    markers = memo.read(host, CephOwnershipMarkers, **timeouts)
    if dump is None or markers is None:
        raise OperationError(f"cannot read {section} {option} or kvceph's markers from the cluster")
    return ownership.plan_option(section, option, str(value), dump, markers, adopt)


def option_commands(section: str, option: str, value: str, timeouts: dict) -> list:
    """Set one option and mark it as kvceph's (the marker holds the value kvceph set)."""
    key = ownership.marker_key("config", ownership.option_name(section, option))
    return [
        ceph("config", "set", section, option, value, **timeouts, json=False),
        ceph("config-key", "set", key, value, **timeouts, json=False),
    ]


@operation(is_idempotent=True)
def config_option(
    who: str,
    option: str,
    value: str,
    adopt: tuple[str, ...] = (),
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Set one option in the monitors' config database (``ceph config set``) where kvceph owns it.

    + who: the section, e.g. ``client.rgw.standard`` (the daemons of cephadm's rgw.standard)
    + option: the option name, e.g. ``rgw_exit_timeout_secs``
    + value: the wanted value
    + adopt: objects the operator handed over for this run (``kvceph_adopt``)
    + connect_timeout / command_timeout: seconds for each ``ceph`` call

    Only for options daemons read at runtime: nothing is restarted. A value someone else set
    in ``who`` (no kvceph marker, or not the value kvceph marked) is refused, not replaced,
    unless ``adopt`` names ``<who>/<option>``; values in wider sections are reported and
    left alone (deploys/cluster/ownership.py).

    **Example:**

    .. code:: python

        ceph.config_option(who="client.rgw.standard", option="rgw_exit_timeout_secs", value="5")
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    plan = read_option_plan(who, option, value, adopt, t)
    for note in plan.notes:
        logger.warning("kvceph: %s", note)
    if plan.refusal:
        raise Refused(plan.refusal)
    if not plan.set:
        host.noop(f"{who} {option} is already {value}")
        return
    yield from option_commands(who, option, str(value), t)


@operation(is_idempotent=True)
def host_label(
    ceph_host: str,
    label: str,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
):
    """
    Put an orchestrator label on a host (placement ``label:`` selects hosts by it).

    + ceph_host: the host's name in ``ceph orch host ls`` (may differ from the inventory name)
    + label: the label, e.g. ``rgw``
    + connect_timeout / command_timeout: seconds for each ``ceph`` call

    **Example:**

    .. code:: python

        ceph.host_label(ceph_host="ceph1", label="rgw")
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    hosts = memo.read(host, CephOrchHosts, **t)
    if hosts is None:
        raise OperationError("cannot list the orchestrator's hosts")
    if ceph_host not in hosts:
        raise OperationError(
            f"host {ceph_host} is not an orchestrator host (known: {', '.join(sorted(hosts))}); "
            "fix: add it with `ceph orch host add`, or set kvceph_ceph_hostname on the inventory "
            "host to its cephadm name"
        )
    if label in hosts[ceph_host]:
        host.noop(f"host {ceph_host} already has label {label}")
        return
    yield ceph("orch", "host", "label", "add", ceph_host, label, **t, json=False)
