"""The state facts each host's stages read, read for all hosts at once before the first stage.

pyinfra reads one fact per round trip, and a host's reads queue behind each other: ceph1's
Ceph reads (each a ``ceph`` or ``radosgw-admin`` client start) ran one after another before
any inference host's file checks began. Here every host reads its list in one command, all
hosts side by side (``memo.prefetch``), so the stages find their facts in the memo.

The lists mirror the stages' ``memo.read`` calls, with the same arguments (they are the memo's
key). A read missing here is not an error, only a round trip: ``--debug`` names it ("fact not
prefetched"), and tests/unit/test_dry_run_fake.py fails on one in the converged plan.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import gevent
import yaml
from pyinfra import logger
from pyinfra.facts.files import Directory, File, Sha256File

from deploys import ceph_cli, render, rgw_service, s3_tier, vllm_service
from deploys.facts import memo
from deploys.facts.ceph import (
    CephConfigValue,
    CephOrchHosts,
    CephOrchStatus,
    CephOsdStat,
    CephPools,
    CephReachable,
    CephServiceSpec,
    CephSpecProbe,
    CephVersions,
)
from deploys.facts.connector import ConnectorInstalled
from deploys.facts.engine import (
    CacheKeyInUse,
    EngineUnits,
    EngineVersions,
    ServiceAccount,
    ServiceDrift,
    ServiceState,
)
from deploys.facts.rgw import RgwBucket, RgwDnsName, RgwLifecycle, RgwUser
from deploys.facts.tls import TRUST_STORES, TrustStore
from deploys.operations import ceph as ceph_ops
from deploys.operations import service
from deploys.operations.tls import ANCHOR_NAME
from deploys.settings import HostSettings

Read = tuple[type, dict]


def _file(path: str) -> list[Read]:
    # kvceph's file operations read both (deploys/operations/files.py).
    return [(File, {"path": path}), (Sha256File, {"path": path})]


def _directory(path: str) -> list[Read]:
    return [(Directory, {"path": path})]


def _ca_anchor(me: HostSettings) -> list[Read]:
    if not me.security.s3_ca_pem:
        return []
    reads: list[Read] = [(TrustStore, {})]
    for store in TRUST_STORES.values():
        reads += _file(f"{store['anchor_dir']}/{ANCHOR_NAME}")
    return reads


def _rgw_service_names(me: HostSettings) -> list[str]:
    """Every service the RGW stage may apply (each orchestrator answer), as preflight renders."""
    names: list[str] = []
    for _, probe in rgw_service.PROBE_ANSWERS:
        try:
            specs, _ = rgw_service.plan_specs(me.rgw, None, probe)
        except rgw_service.SpecError:
            continue
        for spec in specs:
            name = yaml.safe_load(spec)["service_name"]
            if name not in names:
                names.append(name)
    return names


def ceph_admin_reads(me: HostSettings) -> list[Read]:
    """Ceph pools, RGW service and S3 tier (ceph_pools.py, rgw_service.py, s3_tier.py)."""
    t = ceph_cli.timeouts(me.ceph)
    reads: list[Read] = [
        (CephReachable, t),
        (CephPools, t),
        (CephOsdStat, t),
        *(
            (CephConfigValue, {"who": who, "option": option, **t})
            for who, option in ceph_ops.PG_BUDGET_OPTIONS
        ),
        (CephOrchStatus, t),
        (RgwDnsName, t),
        *_directory(s3_tier.SCRIPT_DIR),
        *_directory(s3_tier.ADMIN_DIR),
        *_file(s3_tier.ADMIN_SCRIPT),
        *_file(s3_tier.ADMIN_CONFIG),
        *_ca_anchor(me),
    ]
    if me.rgw.managed_by == "cephadm":
        reads += [(CephVersions, t), (CephOrchHosts, t)]
        if me.rgw.concentrator:
            reads.append((CephSpecProbe, {"spec": rgw_service.probe_spec(me.rgw), **t}))
        reads += [(CephServiceSpec, {"service_name": n, **t}) for n in _rgw_service_names(me)]
    return reads


def radosgw_admin_reads(me: HostSettings) -> list[Read]:
    """The S3 tier's ``radosgw-admin`` reads: read only once a mon answered, since the client
    has no connect timeout of its own and would wait out its command timeout (60 s)."""
    timeout = me.ceph.command_timeout
    return [
        (RgwUser, {"uid": me.s3.user, "timeout": timeout}),
        (RgwBucket, {"bucket": me.s3.bucket, "timeout": timeout}),
        (RgwLifecycle, {"bucket": me.s3.bucket, "timeout": timeout}),
    ]


def inference_reads(me: HostSettings, checked) -> list[Read]:
    """Engine software, inference config and vLLM service (their file, user and unit facts)."""
    e = me.engine
    reads: list[Read] = [
        (ServiceAccount, {"user": e.service_user}),
        (EngineVersions, {"venv": e.venv}),
        (EngineUnits, {}),
        (
            CacheKeyInUse,
            {"lmcache": render.LMCACHE_PATH, "env": render.ENV_PATH, "unit": render.UNIT_PATH},
        ),
        *_ca_anchor(me),
        *_directory(e.service_home),
        *_directory(str(PurePosixPath(e.venv).parent)),
        *_directory(render.CONFIG_DIR),
        *_directory(render.aws_dir(me)),
    ]
    if me.security.guard:
        reads += _directory(render.GUARD_DIR)
    if me.lmcache.tier.connector == "kvceph":
        reads.append((ConnectorInstalled, {"venv": e.venv}))
    shared = vllm_service.shared_files_desired(me, checked)
    paths = list(shared)
    for engine in e.engines:
        paths += [render.env_path(engine), render.unit_path(engine)]
        wanted = vllm_service.running_state(me, checked, engine, shared)
        drift = service.state_kwargs(
            wanted["unit"], wanted["environment"], wanted["files"], wanted["secret_environment"]
        )
        reads += [(ServiceState, {"unit": engine.unit}), (ServiceDrift, drift)]
    for path in dict.fromkeys(paths):
        reads += _file(path)
    return reads


def reads(me: HostSettings, checked) -> list[Read]:
    """Every state fact the host's stages read through the memo, with their arguments."""
    out: list[Read] = []
    if me.is_ceph_admin and me.ceph is not None:
        out += ceph_admin_reads(me)
    if me.is_inference and me.lmcache.kv_bytes_per_token is not None:
        out += inference_reads(me, checked)
    return out


# The orchestrator's reads go one at a time, as the stages would send them: the cephadm mgr
# module answers them (``orch apply --dry-run`` among them, which stores a preview) and a run
# with them sent at once was once seen never to converge a changed RGW spec (cause not proven).
ORCHESTRATOR_LANE = {
    cls: "orchestrator" for cls in (CephOrchStatus, CephOrchHosts, CephSpecProbe, CephServiceSpec)
}


def _prefetch_host(host, me: HostSettings, checked) -> tuple[int, int]:
    """(facts kept, facts asked) on one host."""
    wanted = reads(me, checked)
    kept = memo.prefetch(host, wanted, ORCHESTRATOR_LANE)
    if me.is_ceph_admin and me.ceph is not None:
        reachable = memo.read(host, CephReachable, **ceph_cli.timeouts(me.ceph))
        if reachable and reachable.get("reachable"):
            more = radosgw_admin_reads(me)
            kept += memo.prefetch(host, more)
            wanted += more
    return kept, len(wanted)


def run(inventory, checked) -> None:
    """Prefetch every connected host's reads, all hosts at once (after the run lock is held)."""
    jobs = []
    for name, me in checked.hosts.items():
        host = inventory.get_host(name)
        if host.connected and (me.is_ceph_admin or me.is_inference):
            jobs.append((name, gevent.spawn(_prefetch_host, host, me, checked)))
    gevent.joinall([job for _, job in jobs])
    for name, job in jobs:
        kept, asked = job.value or (0, 0)
        logger.debug("kvceph: prefetched %d of %d facts on %s", kept, asked, name)
