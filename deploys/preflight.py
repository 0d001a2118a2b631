"""Checks that run once, before the first operation on any host.

pyinfra executes deploy.py once per host while it collects operations, and facts are read
during that collection; so everything that can be decided from the inventory alone is decided
here, on the first host's pass, and a problem stops the run before any host is touched.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from gevent.lock import BoundedSemaphore
from pyinfra import logger
from pyinfra.api.exceptions import ConnectError, PyinfraError

from deploys import compat, paths, render, s3_names, settings, tier_preflight
from deploys.access import engine_users, lock, sudo
from deploys.cluster import bucket_policy, capacity, ceph_cli
from deploys.engine import prerequisites, upgrade
from deploys.facts import memo
from deploys.facts.capacity import CephDf
from deploys.facts.ceph import CephReachable, CephVersions
from deploys.facts.engine import EngineVenvs, KeySeedsInUse, MemTotal, ModelConfig
from deploys.facts.model import MirroredModel
from deploys.facts.prerequisites import AdminPrerequisites, InferencePrerequisites
from deploys.facts.resolver import Resolution
from deploys.facts.rgw import RgwUser
from deploys.settings import context_length, group_data, model_source, secrets
from deploys.settings.inventory import CacheGroup, check_inventory
from deploys.settings.reader import SettingsError
from deploys.settings.verification import check_canary_hosts
from deploys.tier import kv_sizing

compat.install()

# The run's checks, kept on its State object (not keyed by id(state): a freed State's id is
# reused, and a later State would get an earlier run's result).
_CACHE_ATTR = "_kvceph_preflight"
# pyinfra loads deploy.py for all hosts concurrently (gevent); the first one does the checks.
_ONCE = BoundedSemaphore()


@dataclass(frozen=True)
class Preflight:
    hosts: dict[str, settings.HostSettings]
    cache_groups: list[CacheGroup]
    credentials: secrets.S3Credentials
    # The engines' user quota this run sets or keeps (deploys/cluster/capacity.py); None: the Ceph
    # admin host is outside the run (--limit), so the S3 tier does not run either.
    quota: capacity.Quota | None = None
    # Each cache group's RGW user and object-name prefix (deploys/access/engine_users.py).
    users: tuple[bucket_policy.GroupUser, ...] = ()

    @property
    def engine_count(self) -> int:
        """Engines on all inference hosts of the inventory (the roll's percentage base)."""
        return sum(len(h.engine.engines) for h in self.hosts.values() if h.is_inference)

    @property
    def admin(self) -> settings.HostSettings:
        return next(h for h in self.hosts.values() if h.is_ceph_admin)


class PreflightError(PyinfraError):
    """A problem found before any host is touched; pyinfra prints it as one line."""


def _stop(message: str) -> None:
    # pyinfra re-raises its own errors from deploy files without a traceback:
    # "--> pyinfra error in deploy.py line N: kvceph: <host>: <key> = ...; fix: ..."
    raise PreflightError(f"kvceph: {message}")


def _dry_run() -> bool:
    # pyinfra keeps --dry in the CLI, not in State; the plan must never take the lock.
    return any(a in sys.argv for a in ("--dry", "--debug-operations", "--debug-facts"))


def _take_lock(inventory, checked: Preflight) -> None:
    admin = inventory.get_host(checked.admin.host)
    if _dry_run():
        return
    try:
        # With --limit the admin host may be outside the run: the lock still lives there.
        admin.connect(reason="for the run lock", raise_exceptions=True)
        status = lock.acquire(
            admin,
            stale_after=checked.admin.lock_stale_after,
            break_lock=checked.admin.run.break_lock,
        )
    except ConnectError as exc:
        _stop(f"{admin.name}: cannot connect to take the run lock: {exc}; fix: check SSH to it")
    except lock.LockError as exc:
        _stop(str(exc))
    logger.info("kvceph: run lock on %s: %s", admin.name, status)


def run(state, inventory, lock: bool = True) -> Preflight:
    """Validate every host's settings and the cross-host invariants (once per run).

    ``lock``: take the run lock (False for status.py: it writes nothing, and a deploy started
    while it reads must not find the lock held).
    """
    with _ONCE:
        cached = getattr(state, _CACHE_ATTR, None)
        if cached is None:
            cached = _check(inventory, lock)
            setattr(state, _CACHE_ATTR, cached)
        return cached


def _renders(me: settings.HostSettings, creds) -> list[tuple[str, object]]:
    """(template, render call) for every file kvceph writes for this host's roles."""
    calls: list[tuple[str, object]] = []
    if me.is_inference:
        creds = creds.engine(me.engine.cache_group)
        # else outside this run, unsized; MP writes no lmcache.yaml
        if me.lmcache.kv_bytes_per_token is not None and not me.engine.profile.mp:
            calls.append(("lmcache.yaml.j2", lambda: render.lmcache_yaml(me)))
        for engine in me.engine.engines:
            calls += [
                ("vllm.env.j2", lambda engine=engine: render.env_file(me, "0" * 64, engine)),
                ("vllm.service.j2", lambda engine=engine: render.unit(me, engine)),
            ]
        if me.engine.profile.mp and me.lmcache.kv_bytes_per_token is not None:
            calls.append(("lmcache-server.service.j2", lambda: render.mp_server_unit(me)))
        calls += [
            ("secrets.env.j2", lambda: render.secrets_env_file(creds)),
            ("aws_credentials.j2", lambda: render.aws_credentials(me, creds)),
            ("aws_config.j2", lambda: render.aws_config(me)),
        ]
    return calls


def _template_of(exc: BaseException, fallback: str) -> str:
    # jinja2 puts the template's own file in the traceback; syntax errors carry its name.
    name = getattr(exc, "name", None)
    if isinstance(name, str) and name:
        return name
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    return next((f.rsplit("/", 1)[-1] for f in reversed(frames) if f.endswith(".j2")), fallback)


def check_templates(hosts: dict[str, settings.HostSettings], creds) -> None:
    """Render every template for every host (no facts); the first error stops the run."""
    for name, me in hosts.items():
        for label, call in _renders(me, creds):
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - any rendering failure is one line
                template = _template_of(exc, label)
                error = " ".join(str(exc).split()) or type(exc).__name__
                _stop(
                    f"{name}: template {template}: {type(exc).__name__}: {error}; "
                    f"fix: correct templates/{template} or the setting it renders"
                    if template.endswith(".j2")
                    else f"{name}: template {template}: {type(exc).__name__}: {error}; "
                    "fix: correct the template or the setting it renders"
                )


# Below this length an abbreviation could be meant for many flags; argparse takes an
# unambiguous prefix for the whole flag (allow_abbrev), so "--kv-cache-dt fp8" is one.
_MIN_ABBREVIATION = 6


def check_engine_args(hosts: dict[str, settings.HostSettings]) -> None:
    """No ``kvceph_engine_profile.extra_args`` word sets a flag kvceph renders itself
    (``render.managed_flags``): in ``--flag value``, ``--flag=value``, ``--flag_name``,
    ``--flag.field`` (JSON) and abbreviated forms."""
    key = "kvceph_engine_profile.extra_args"
    for name, me in hosts.items():
        if not me.is_inference:
            continue
        managed = render.managed_flags(me)
        for arg in me.engine.profile.extra_args:
            flag = render.flag_name(arg)
            hit = flag if flag in managed else None
            if hit is None and len(flag) >= _MIN_ABBREVIATION:
                hit = next((m for m in sorted(managed) if m.startswith(flag)), None)
            if hit:
                raise SettingsError(
                    f"{name}: {key} = {arg!r}: sets {hit}, which kvceph renders itself (the "
                    "last one wins, so the engine would run other than kvceph sizes, keys and "
                    f"checks it); fix: remove it; set {hit} through its kvceph setting "
                    "(docs/settings.md)"
                )


def check_ingress_hosts(hosts: dict[str, settings.HostSettings], rgw_hosts: list[str]) -> None:
    """No more ingress VIPs than rgw hosts: cephadm gives each VIP its own MASTER host and
    refuses the rest only when it writes keepalived.conf, after the spec is applied ("Number
    of virtual IPs for ingress is greater than number of available hosts")."""
    for name, me in hosts.items():
        rgw = me.rgw
        own = [v for v in rgw.ingress_virtual_ips if v.split("/")[0] in rgw_hosts]
        if rgw.managed_by == "cephadm" and own:
            # keepalived would move the host's own address to another host on failover.
            raise SettingsError(
                f"{name}: {rgw.ingress_key} = {own[0]!r}: is an rgw host's own address; "
                "fix: use a free address of the rgw hosts' subnet as the VIP"
            )
        if rgw.managed_by != "cephadm" or len(rgw.ingress_virtual_ips) <= 1:
            continue
        if len(rgw.ingress_virtual_ips) > len(rgw_hosts):
            raise SettingsError(
                f"{name}: {rgw.ingress_key} = {list(rgw.ingress_virtual_ips)}: "
                f"{len(rgw.ingress_virtual_ips)} VIPs for {len(rgw_hosts)} host(s) of the rgw "
                "group; cephadm gives each VIP its own host and refuses more VIPs than hosts; "
                "fix: list at most one VIP per rgw host"
            )
        return  # one cluster, one RGW setting: the first host that has it says it all


# A host outside this run (--limit): pyinfra has not connected it, its facts stay unread.
OUTSIDE_RUN = object()


def _fact(inventory, name: str, fact, **kwargs):
    """A fact of a host pyinfra has connected (read-only), or OUTSIDE_RUN."""
    target = inventory.get_host(name)
    return target.get_fact(fact, **kwargs) if target.connected else OUTSIDE_RUN


def _memo_fact(inventory, name: str, fact, **kwargs):
    """``_fact`` through the run's memo: a fact a stage reads again (CephVersions)."""
    target = inventory.get_host(name)
    return memo.read(target, fact, **kwargs) if target.connected else OUTSIDE_RUN


def _seeds_fact(inventory, name: str, connect: bool):
    """KeySeedsInUse of a host; with ``connect``, a host outside the run is connected first
    (read-only, as the run lock connects the admin host)."""
    target = inventory.get_host(name)
    if connect and not target.connected:
        target.connect(reason="to read its engines' hash seeds", show_errors=False)
    if not target.connected:
        return OUTSIDE_RUN
    return memo.read(target, KeySeedsInUse, directory=paths.CONFIG_DIR)


def resolve_kv_sizes(hosts: dict[str, settings.HostSettings], read_config) -> dict:
    """Hosts serving a model directory get its KV size from the config.json on the host.

    ``read_config(host, path)`` returns the parsed config.json, None, or OUTSIDE_RUN (left
    unsized: nothing is rendered or checked for it). One-line SettingsError when it is missing
    or its architecture is refused (MLA, hybrid attention).
    """
    out = dict(hosts)
    for name, me in hosts.items():
        if not me.is_inference or me.lmcache.kv_bytes_per_token is not None:
            continue
        model, tp = me.engine.serve_model, me.engine.tensor_parallel_size
        key = _model_key(me)
        config = read_config(name, model)
        if config is OUTSIDE_RUN:
            continue
        fix = "fix: put the model there first, or set kvceph_kv_bytes_per_token"
        if config is None:
            raise SettingsError(
                f"{name}: {key} = {model!r}: no readable {model}/config.json on the host "
                f"to size the KV cache from; {fix}"
            )
        try:
            shape = kv_sizing.shape_from_config(config)
        except kv_sizing.SizingError as exc:
            raise SettingsError(
                f"{name}: {key} = {model!r}: {exc}: its KV is not layers x heads x "
                f"head_dim, kvceph does not guess its size; {fix}"
            ) from None
        size = kv_sizing.kv_bytes_per_token(shape, me.engine.kv_dtype, tp)
        lmc = dataclasses.replace(
            me.lmcache, kv_bytes_per_token=size, kv_source=f"{model}/config.json"
        )
        out[name] = dataclasses.replace(me, lmcache=lmc)
    return out


def _model_key(me: settings.HostSettings) -> str:
    return "kvceph_model_path" if me.engine.source.source == "path" else "kvceph_model"


def check_model_directories(hosts: dict[str, settings.HostSettings], read_config) -> None:
    """An engine served from a directory on the host never starts where it lacks config.json.

    ``read_config(host, path)`` as for ``resolve_kv_sizes``; a mirrored model is checked after
    its pull, against the mirror's manifest.
    """
    for name, me in hosts.items():
        if not me.is_inference or me.engine.source.source != "path":
            continue
        path = me.engine.serve_model
        config = read_config(name, path)
        if config is None:
            raise SettingsError(
                f"{name}: kvceph_model_path = {path!r}: no readable config.json there, the "
                "engine would not start; fix: mount or copy the model directory there first"
            )


def _model_config(name: str, me: settings.HostSettings, read_config):
    """(config.json, where it was read) of a model served from a directory; (None, "") when
    kvceph reads none (a hub model id, a mirrored model neither on the controller nor staged).

    A mirrored model's copy on the controller (kvceph_model_mirror_from) is what the mirror and
    every staged directory hold: read there, no host is asked.
    """
    path, src = me.engine.serve_model, me.engine.source
    if not path.startswith("/"):
        return None, ""
    if src.source == "mirror" and src.mirror_from:
        local = Path(src.mirror_from) / "config.json"
        try:
            return json.loads(local.read_text()), f"{local} on the controller"
        except (OSError, ValueError):
            return None, ""  # check_mirror names the missing file
    config = read_config(name, path)
    if config is not None:  # or OUTSIDE_RUN
        return config, f"{path}/config.json"
    return None, ""


def check_revisions(hosts: dict[str, settings.HostSettings], groups) -> None:
    """A hub source names its commit: the same object names must stand for the same weights
    on every host, including one replaced after the model's repository moved (issue 36)."""
    for g in groups:
        for name in g.hosts:
            refusal = model_source.unpinned_refusal(hosts[name].engine.source)
            if refusal:
                raise SettingsError(f"{name}: {refusal}")


def revision_lines(hosts: dict[str, settings.HostSettings], groups) -> list[str]:
    """The plan's line per cache group: which weights its object keys stand for."""
    lines = []
    for g in groups:
        src = hosts[g.hosts[0]].engine.source
        if src.revision:
            weights = f"{src.source} {src.name} @ {src.revision}"
        else:
            weights = f"the directory {src.path or src.name} (keep it the same on every host)"
        lines.append(f"kvceph: cache group {g.model} TP={g.tensor_parallel_size}: {weights}")
    return lines


def check_context_lengths(hosts: dict[str, settings.HostSettings], read_config) -> None:
    """kvceph_max_model_len within the model's native context (deploys/settings/context_length.py).

    ``read_config(host, path)`` as for ``resolve_kv_sizes``.
    """
    for name, me in hosts.items():
        if not me.is_inference:
            continue
        config, where = _model_config(name, me, read_config)
        if config is OUTSIDE_RUN:
            continue
        refusal = context_length.refusal(me, config, where)
        if refusal:
            raise SettingsError(refusal)


def check_mirror(hosts: dict[str, settings.HostSettings], creds, mirrored) -> None:
    """The mirror source's keys, and every mirrored model either in the mirror or on the controller.

    ``mirrored(bucket, prefix)`` says whether the mirror holds the model's manifest (True,
    False, or OUTSIDE_RUN when the Ceph admin host is outside this run).
    """
    users = [(name, me.engine.source) for name, me in hosts.items() if me.is_inference]
    users = [(name, src) for name, src in users if src.source == "mirror"]
    if not users:
        return
    try:
        model_source.mirror_users(src for _, src in users)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    names = ", ".join(name for name, _ in users)
    if not (creds.models_access_key and creds.models_secret_key):
        raise SettingsError(
            f"controller: {secrets.MODELS_ACCESS_ENV} / {secrets.MODELS_SECRET_ENV} missing: the "
            f"model mirror's read-only key, needed by kvceph_model_source mirror ({names}); "
            f"fix: export {secrets.MODELS_ACCESS_ENV} / {secrets.MODELS_SECRET_ENV} or put them "
            "in secrets.env (0600; docs/security.md)"
        )
    if creds.access_key and str.__str__(creds.models_access_key) == str.__str__(creds.access_key):
        raise SettingsError(
            f"controller: {secrets.MODELS_ACCESS_ENV} equals {secrets.ACCESS_ENV}: the KV key "
            "would write the model mirror; fix: give the mirror its own read-only key pair"
        )
    seen = set()
    for name, src in users:
        if src.mirror_prefix in seen:
            continue
        seen.add(src.mirror_prefix)
        if src.mirror_from is not None:
            if not (Path(src.mirror_from) / "config.json").is_file():
                raise SettingsError(
                    f"{name}: kvceph_model_mirror_from = {src.mirror_from!r}: no config.json "
                    "there on the controller; fix: give the model directory to upload"
                )
            continue
        if mirrored(src.mirror_bucket, src.mirror_prefix) is False:
            raise SettingsError(
                f"{name}: kvceph_model_revision = {src.revision!r}: the mirror has no "
                f"s3://{src.mirror_bucket}/{src.mirror_prefix}; fix: check kvceph_model and the "
                "revision, or set kvceph_model_mirror_from to the model directory on the "
                "controller (uploaded once)"
            )


def check_sizing(hosts: dict[str, settings.HostSettings], mem_total) -> None:
    """Refuse settings that kill an engine, and a host whose RAM cannot pin its buffers.

    ``mem_total(host)`` is the host's MemTotal in bytes, or None when unknown (not checked).
    Rule (README): the pinned buffers of all engines on a host <= half of its MemTotal.
    """
    for name, me in hosts.items():
        if not me.is_inference or me.lmcache.kv_bytes_per_token is None:
            continue  # not an engine, or outside this run and served from a directory
        refusal = kv_sizing.refusal_for(me)
        if refusal:
            raise SettingsError(refusal)
        total = mem_total(name)
        total = None if total is OUTSIDE_RUN else total
        # Every engine of the host pins its own buffers.
        engines = len(me.engine.engines)
        pinned = kv_sizing.pinned_bytes(me) * engines
        if total and not kv_sizing.pinned_ram_fits(pinned, total):
            gib = kv_sizing.GIB
            cpu = kv_sizing.limits(me).max_local_cpu_size
            workers = me.engine.tensor_parallel_size * engines
            of = f"{engines} engines x {me.engine.tensor_parallel_size}" if engines > 1 else ""
            raise SettingsError(
                f"{name}: kvceph_lmcache_max_local_cpu_size = {cpu!r}: {cpu:g} GiB buffer on each "
                f"of {of or workers} workers, pinned as {pinned / workers / gib:g} GiB (PyTorch "
                f"rounds to a power of two) = {pinned / gib:.1f} GiB, over "
                f"{kv_sizing.PINNED_RAM_FRACTION:.0%} of the host's {total / gib:.1f} GiB RAM "
                "(LMCache pins it even with local_cpu false); fix: lower kvceph_max_model_len "
                "or the buffer, or use a host with more RAM"
            )


def _family(ips) -> str:
    """ "6" for a list of IPv6 addresses, else "4" (settings refuse a mixed list)."""
    return "6" if ":" in ips[0] else "4"


def wheelhouse_sizes(directory: str | None) -> dict[str, int] | None:
    """The controller's engine wheelhouse, file -> bytes (None when unset or empty: the
    engine-software stage refuses an empty one).

    + directory: ``kvceph_engine_wheelhouse``
    """
    if not directory:
        return None
    found = {w.name: w.stat().st_size for w in sorted(Path(directory).glob("*.whl"))}
    return found or None


def check_prerequisites(hosts: dict[str, settings.HostSettings], read) -> None:
    """Every host's prerequisites (deploys/engine/prerequisites.py), one fact per role, before any
    stage: all problems of all hosts in one error, one line each.

    ``read(host, fact, **kwargs)`` is the fact's answer, or OUTSIDE_RUN (not checked).
    """
    lines = []
    for name, me in hosts.items():
        if me.is_inference:
            accelerator = me.engine.accelerator if me.engine.accelerator_check else None
            fact = read(
                name,
                InferencePrerequisites,
                venv=me.engine.venv,
                accelerator=accelerator,
                service_user=me.engine.service_user,
            )
            venvs, upload = None, None
            if me.engine.install:
                venvs = read(name, EngineVenvs, base=me.engine.venv_base)
                upload = wheelhouse_sizes(me.engine.wheelhouse)
            if fact is not OUTSIDE_RUN:
                lines += prerequisites.inference_problems(
                    me, fact, None if venvs is OUTSIDE_RUN else venvs, upload
                )
                note = prerequisites.driver_note(me) if accelerator else None
                if note:
                    logger.warning(note)
        if me.is_ceph_admin:
            fact = read(name, AdminPrerequisites)
            if fact is not OUTSIDE_RUN:
                # The cluster only when a mon answers (a failed fact stops pyinfra with a
                # traceback); an unreachable cluster is the Ceph pools stage's one line.
                t = ceph_cli.timeouts(me.ceph)
                cluster = None
                if (read(name, CephReachable, **t) or {}).get("reachable"):
                    cluster = read(name, CephVersions, **t)
                lines += prerequisites.admin_problems(me, fact, cluster or None)
    if lines:
        _stop("; ".join(lines) + " (nothing was changed)")


def apply_scheme_seeds(hosts: dict[str, settings.HostSettings], groups, read):
    """Every cache group's hosts with the ``PYTHONHASHSEED`` of the profile's key scheme
    (deploys/engine/upgrade.py ``group_seed``), and the plan's line per group.

    ``read(host, connect)`` is the host's KeySeedsInUse fact, or OUTSIDE_RUN; with ``connect``
    a host outside this run (--limit) is connected to read it: asked only when the hosts in the
    run show no scheme (a replaced host run alone must not guess its group's seed).
    """
    out = dict(hosts)
    lines = []
    for g in groups:
        first = hosts[g.hosts[0]].engine
        fleet = first.python_hash_seed
        pair = (first.profile.vllm_version, first.profile.lmcache_version)
        found = {name: read(name, False) for name in g.hosts}
        unread = []
        if not any(f for f in found.values() if f is not OUTSIDE_RUN):
            found.update({n: read(n, True) for n, f in found.items() if f is OUTSIDE_RUN})
            unread = sorted(n for n, f in found.items() if f is OUTSIDE_RUN)
        files = [v for f in found.values() if f is not OUTSIDE_RUN for v in f.values()]
        choice = upgrade.group_seed(fleet, pair, files)
        for name in g.hosts:
            me = out[name]
            source = (
                f"kvceph_engine_profile (key scheme {choice.scheme}'s own hash seed)"
                if choice.derived
                else me.engine.hash_seed_source
            )
            engine = dataclasses.replace(
                me.engine, python_hash_seed=choice.seed, hash_seed_source=source
            )
            out[name] = dataclasses.replace(me, engine=engine)
        line = (
            f"kvceph: cache group {g.model} TP={g.tensor_parallel_size}: key scheme "
            f"{choice.scheme}: hash seed: {choice.why}"
        )
        if unread:
            line += f" (not read: {', '.join(unread)}, unreachable)"
        lines.append(line)
    return out, lines


def check_resolvers(hosts: dict[str, settings.HostSettings], resolution) -> None:
    """Every inference host's resolver returns every address of the bucket's name
    (deploys/s3_names.py): checked before any host is touched, so no engine restarts onto a
    name that resolves to one RGW.

    ``resolution(host, name, family)`` is the host's Resolution fact (``family`` "4" or "6",
    of the list), or OUTSIDE_RUN.
    """
    for name, me in hosts.items():
        if not me.is_inference or not me.s3.endpoint_ips:
            continue
        if len(me.s3.endpoint_ips) == 1 and not me.s3.wildcard_dns:
            continue  # one line: any resolver returns it
        seen = resolution(name, me.s3.bucket_host, _family(me.s3.endpoint_ips))
        if seen is OUTSIDE_RUN:
            continue
        refusal = s3_names.refusal(me, seen, render.hosts_lines(me))
        if refusal:
            raise SettingsError(refusal)


def check_quota(inventory, admin: settings.HostSettings, hosts: dict):
    """(the quota, the plan's line) from the Ceph admin host's facts; (None, "") outside the
    run. A deploy without a quota stops here, in one line (deploys/cluster/capacity.py)."""
    admin = hosts[admin.host]
    timeout = ceph_cli.command_timeout(admin.ceph)
    target = inventory.get_host(admin.host)
    if not target.connected:
        return None, ""
    # Through the memo: the S3 tier's operations read the same fact (deploys/facts/memo.py).
    user = memo.read(target, RgwUser, uid=admin.s3.admin_user, timeout=timeout)
    explicit = admin.s3.quota_max_size_gb is not None or admin.s3.quota_unbounded
    df = None
    if not explicit and not ((user or {}).get("user_quota") or {}).get("enabled"):
        ceph = admin.ceph
        df = _fact(
            inventory,
            admin.host,
            CephDf,
            connect_timeout=ceph.connect_timeout if ceph else 10,
            command_timeout=timeout,
        )
    try:
        return capacity.plan(admin, list(hosts.values()), user, df)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def _rgw_addresses(inventory) -> list[str]:
    group = inventory.get_group("rgw", [])
    return [str(h.data.get("ssh_hostname") or h.name) for h in group]


def _check(inventory, lock: bool = True) -> Preflight:
    try:
        hosts = {
            h.name: settings.load(h.data, h.name, list(dict.fromkeys(h.groups))) for h in inventory
        }
        groups = check_inventory(list(hosts.values()))
        check_revisions(hosts, groups)
        check_engine_args(hosts)
        check_canary_hosts(hosts, groups)
        sudo.check_no_password(inventory)
        sudo.check_noninteractive(inventory)
        group_data.refuse_committed_secrets()
        check_ingress_hosts(hosts, _rgw_addresses(inventory))
        hosts = s3_names.fill_rgw_group(hosts, _rgw_addresses(inventory))
        creds = secrets.load()
        engine_users.check_keys(groups, creds)
        users = tuple(engine_users.group_users(hosts, groups))
        hosts, seed_line = engine_users.apply_hash_seed(hosts, creds)
        # Read-only facts, after every check that needs none: a model directory's config.json,
        # then RAM against the pinned buffers.
        configs: dict[tuple[str, str], object] = {}

        def read_config(name: str, path: str):
            # read once per host and directory: the checks below share it
            if (name, path) not in configs:
                configs[name, path] = _fact(inventory, name, ModelConfig, path=path)
            return configs[name, path]

        check_model_directories(hosts, read_config)
        check_context_lengths(hosts, read_config)
        admin = next(h for h in hosts.values() if h.is_ceph_admin)
        check_mirror(
            hosts,
            creds,
            lambda bucket, prefix: _fact(
                inventory,
                admin.host,
                MirroredModel,
                bucket=bucket,
                prefix=prefix,
                timeout=admin.ceph.command_timeout,
            ),  # fmt: skip
        )
        hosts = resolve_kv_sizes(hosts, read_config)
        check_sizing(hosts, lambda name: _fact(inventory, name, MemTotal))
        check_prerequisites(hosts, lambda name, fact, **kw: _memo_fact(inventory, name, fact, **kw))
        hosts, scheme_lines = apply_scheme_seeds(
            hosts, groups, lambda name, connect: _seeds_fact(inventory, name, connect)
        )
        check_resolvers(
            hosts,
            lambda host, name, family: _fact(
                inventory,
                host,
                Resolution,
                hostname=name,
                # IPv4 lists keep the fact's original arguments (and its recorded answers).
                **({"family": family} if family == "6" else {}),
            ),
        )
        tier_preflight.check_connector(hosts)
        hosts = tier_preflight.resolve(hosts)
        quota, quota_line = check_quota(inventory, admin, hosts)
    except (SettingsError, secrets.SecretsError) as exc:
        _stop(str(exc))
    for g in groups:
        logger.info(
            "kvceph: cache group %s TP=%d: %s", g.model, g.tensor_parallel_size, ", ".join(g.hosts)
        )
    for line in revision_lines(hosts, groups):
        (logger.warning if "WARNING" in line else logger.info)(line)
    for line in s3_names.plan_lines(hosts):
        logger.info(line)
    for line in tier_preflight.plan_lines(hosts, groups):
        logger.info(line)
    if quota_line:
        logger.info(quota_line)
    (logger.warning if "WARNING" in seed_line else logger.info)(seed_line)
    for line in scheme_lines:
        logger.info(line)
    for line in engine_users.plan_lines(list(users), creds, admin):
        (logger.warning if "WARNING" in line else logger.info)(line)
    check_templates(hosts, creds)
    result = Preflight(hosts, groups, creds, quota, users)
    if lock:
        _take_lock(inventory, result)
    return result
