"""Read one host's status: the deploy's own facts through the memo, plus status's moment reads.

State facts (engine versions, the unit's drift, the files, the cache key in use; the RGW user,
bucket and lifecycle) are the facts and arguments the deploy's stages read, read through
``deploys/facts/memo`` as the stages read them. What measures a moment (an engine's /health
and /metrics, the S3 endpoint answering) always goes to the host. Nothing here writes: every
command is a fact's, or an orchestrator read (``ceph orch ls`` / ``orch ps``).
"""

from __future__ import annotations

from pyinfra.facts.files import FileContents

from deploys import paths, render
from deploys.cluster import cache_trim, ceph_cli
from deploys.engine import engine_address
from deploys.facts import memo
from deploys.facts.capacity import CacheTrimState, RgwUserStats
from deploys.facts.ceph import CephOrchStatus, CephReachable
from deploys.facts.connector import Crc32cRefused, PutsSkipped, S3Disabled
from deploys.facts.engine import CacheKeyInUse, EngineVersions, ServiceDrift
from deploys.facts.rgw import RgwLifecycle, RgwReachable, RgwUser
from deploys.facts.status import (
    BucketUsage,
    EngineAnswers,
    KvNamespaces,
    MPServerAnswers,
    RgwDaemons,
    UnitTimes,
)
from deploys.operations import service
from deploys.operations.orch_readback import _host_run, read_service
from deploys.stages import rgw_service, vllm_service
from deploys.status import drift

# Seconds per request to an engine's /health, /version, /metrics.
ENGINE_TIMEOUT = 10


def _cache_key_read() -> tuple[type, dict]:
    return (
        CacheKeyInUse,
        {"lmcache": paths.LMCACHE_PATH, "env": paths.ENV_PATH, "unit": paths.UNIT_PATH},
    )


def rgw_service_names(me) -> list[str]:
    """Every orchestrator service the RGW stage may apply (one per answer of its dry run)."""
    names: list[str] = []
    for _, probe in rgw_service.PROBE_ANSWERS:
        try:
            specs, _ = rgw_service.plan_specs(me.rgw, None, probe)
        except rgw_service.SpecError:
            continue
        for spec in specs:
            name = spec["service_name"]
            if name not in names:
                names.append(name)
    return names


def read_engines(host, me, checked) -> dict:
    """Versions, cache key in use, and per engine: unit, drift, live answers."""
    e = me.engine
    versions = memo.read(host, EngineVersions, venv=e.venv)
    in_use = memo.read(host, _cache_key_read()[0], **_cache_key_read()[1])
    lmcache_text = memo.read(host, FileContents, path=paths.LMCACHE_PATH)
    aws_path = f"{render.aws_dir(me)}/config"
    aws_text = memo.read(host, FileContents, path=aws_path)
    shared = vllm_service.shared_files_desired(me, checked)
    engines = []
    for engine in e.engines:
        wanted = vllm_service.running_state(me, checked, engine, shared)
        kwargs = service.state_kwargs(
            wanted["unit"], wanted["environment"], wanted["files"], wanted["secret_environment"]
        )
        current = memo.read(host, ServiceDrift, **kwargs)
        reasons = service.restart_reasons(
            current,
            wanted["digest"],
            wanted["environment"],
            wanted["files"],
            wanted["secret_environment"],
        )
        digest = wanted["digest"]
        env_path, unit_path = render.env_path(engine), render.unit_path(engine)
        settings = [
            *drift.unit_changes(
                unit_path, memo.read(host, FileContents, path=unit_path), render.unit(me, engine)
            ),
            *drift.env_changes(
                env_path,
                memo.read(host, FileContents, path=env_path),
                render.env_file(me, digest, engine),
            ),
            # MP mode writes no lmcache.yaml: nothing to drift from.
            *(
                []
                if e.profile.mp
                else drift.lmcache_changes(
                    paths.LMCACHE_PATH, lmcache_text, render.lmcache_yaml(me)
                )
            ),
            *drift.text_changes(aws_path, aws_text, render.aws_config(me)),
        ]
        answers = host.get_fact(
            EngineAnswers,
            python=f"{e.venv}/bin/python",
            port=engine.port,
            timeout=ENGINE_TIMEOUT,
            secrets=paths.SECRETS_PATH,
            address=engine_address.local(me.security.vllm_bind),
        )
        engines.append(
            {
                "engine": engine.name,
                "unit": engine.unit,
                "port": engine.port,
                "state": current,
                "times": memo.read(host, UnitTimes, unit=engine.unit),
                # Only LMCache's stock S3 connector turns S3 off for good (remote_tier.py).
                "s3_off": memo.read(host, S3Disabled, unit=engine.unit)
                if me.lmcache.tier.connector == "lmcache"
                else None,
                # kvceph's connector's own count, only where kvceph_skip_short_puts is on.
                "puts_skipped": memo.read(host, PutsSkipped, unit=engine.unit)
                if me.lmcache.tier.connector == "kvceph" and me.lmcache.tier.skip_short_puts
                else None,
                # kvceph's connector's count of GET bodies refused on their crc32c (each a miss),
                # where its check is on (kvceph_connector_verify_crc32c, the default).
                "crc32c_refused": memo.read(host, Crc32cRefused, unit=engine.unit)
                if me.lmcache.tier.connector == "kvceph" and me.lmcache.tier.verify_crc32c
                else None,
                "desired_digest": digest,
                "reasons": reasons,
                "settings": settings,
                "answers": answers,
            }
        )
    out = {"versions": versions, "cache_key": in_use, "engines": engines}
    if e.profile.mp:
        # One server per host, every engine its client: read on the host (loopback only).
        out["mp_server"] = host.get_fact(
            MPServerAnswers,
            python=f"{e.venv}/bin/python",
            base=f"http://{paths.MP_HOST}:{paths.MP_HTTP_PORT}",
            timeout=ENGINE_TIMEOUT,
        )
    return out


def read_cluster(host, me) -> dict:
    """Bucket, quota, lifecycle, RGW daemons, the S3 front door, from the Ceph admin host."""
    t = ceph_cli.timeouts(me.ceph)
    timeout = me.ceph.command_timeout
    out: dict = {"mon": memo.read(host, CephReachable, **t)}
    # The S3 endpoint as the admin host's writes reach it (haproxy, ingress or concentrator).
    out["endpoint"] = {
        "url": me.s3.admin_endpoint,
        **(host.get_fact(RgwReachable, endpoint=me.s3.admin_endpoint) or {}),
    }
    if not (out["mon"] or {}).get("reachable"):
        return out  # radosgw-admin has no connect timeout: it would wait out its own
    user = memo.read(host, RgwUser, uid=me.s3.admin_user, timeout=timeout) or {}
    out["user_bucket_quota"] = user.get("bucket_quota")
    out["user_quota"] = user.get("user_quota")
    if (user.get("user_quota") or {}).get("enabled"):
        # When the user's stats last changed: once the quota is full, since when.
        out["user_stats"] = memo.read(host, RgwUserStats, uid=me.s3.admin_user, timeout=timeout)
    out["lifecycle"] = memo.read(host, RgwLifecycle, bucket=me.s3.bucket, timeout=timeout)
    out["bucket"] = memo.read(host, BucketUsage, bucket=me.s3.bucket, timeout=timeout)
    # Which namespaces hold objects (settings/namespace.py): an old one stays until it expires.
    out["namespaces"] = memo.read(
        host, KvNamespaces, bucket=me.s3.bucket, admin_script=paths.ADMIN_SCRIPT,
        config=paths.ADMIN_CONFIG,
    )  # fmt: skip
    out["daemons"] = memo.read(host, RgwDaemons, **t)
    # Each cache group's bytes, share and fill rate as the trim timer last read them.
    out["trim"] = memo.read(host, CacheTrimState, path=cache_trim.STATE_PATH)
    if me.rgw.managed_by == "cephadm":
        out["orchestrator"] = memo.read(host, CephOrchStatus, **t)
        run = _host_run(host.state, host)  # orch reads under the login's sudo, as operations do
        out["services"] = {name: read_service(run, name, t) for name in rgw_service_names(me)}
    return out
