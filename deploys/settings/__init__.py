"""Typed, validated settings: the one place that owns defaults and checks them.

Pure package: it reads a mapping (pyinfra's ``host.data`` or a plain dict) and never touches
pyinfra state, so deploy.py, verify.py, the tests and the lab all share it. One module per
subject (``reader`` for the typed getters, ``ceph``, ``s3``, ``engine`` + ``engine_list`` +
``model_source``, ``lmcache``, ``security`` + ``secret_names``, ``verification``,
``inventory`` for the cross-host checks, ``run_control`` for the one-run ``--data`` opt-ins);
:func:`load` assembles one host's :class:`HostSettings` from them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from deploys.settings import (
    engine_env,
    file_formats,
    keys,
    monitoring,
    ports,
    router,
    run_control,
    security,
)
from deploys.settings.ceph import CephSettings, RgwSettings, ceph_settings, rgw_settings
from deploys.settings.engine import EngineSettings, engine_settings
from deploys.settings.lmcache import LMCacheSettings, lmcache_settings
from deploys.settings.reader import ACCELERATOR_OF_GROUP, HOSTNAME, INFERENCE_GROUPS, Reader
from deploys.settings.s3 import S3Settings, s3_settings
from deploys.settings.verification import (
    ProbeSettings,
    VerifySettings,
    probe_settings,
    verify_settings,
)


@dataclass(frozen=True)
class HostSettings:
    host: str
    groups: tuple[str, ...]
    ceph: CephSettings | None
    rgw: RgwSettings
    s3: S3Settings
    engine: EngineSettings | None
    lmcache: LMCacheSettings | None
    lock_stale_after: int
    verify: VerifySettings | None = None  # None only when built by hand in tests
    security: security.SecuritySettings = security.DEFAULTS
    probe: ProbeSettings | None = None  # likewise
    run: run_control.RunControl = run_control.RunControl()  # this run's --data opt-ins
    # The kvceph_* keys this host's data sets (key -> repr of the value), and the keys its
    # settings read (settings/placement.py).
    given: tuple[tuple[str, str], ...] = ()
    read_keys: frozenset[str] = frozenset()
    monitoring: monitoring.MonitoringSettings | None = None  # hosts of group monitoring
    router: router.RouterSettings | None = None  # hosts of group router
    # kvceph_lab: a throwaway lab (group_data/lab.py sets it): the unsafe choices a fleet
    # is refused (plain-HTTP S3, the public hash seed) are allowed here.
    lab: bool = False

    @property
    def is_inference(self) -> bool:
        return self.engine is not None

    @property
    def is_ceph_admin(self) -> bool:
        return "ceph_admin" in self.groups


def load(data: Any, host: str, groups: Iterable[str]) -> HostSettings:
    """Validate one host's data; raise SettingsError (one line) on the first problem."""
    groups = tuple(groups)
    r = Reader(data, host)
    security.refuse_secrets_in_data(r)
    keys.refuse_unknown(r)
    file_formats.check(r)
    inference = [g for g in INFERENCE_GROUPS if g in groups]
    if len(inference) > 1:
        raise r.fail("groups", list(groups), "host is in both gpu and gaudi", "put it in one group")
    lab = r.bool("kvceph_lab", False)
    rgw = rgw_settings(r)
    s3 = s3_settings(r, rgw, sets_quota="ceph_admin" in groups)
    if s3.scheme == "http" and not lab:
        raise r.fail(
            "kvceph_s3_endpoint",
            s3.endpoint,
            "is plain HTTP: every engine's S3 key signature and the KV cache cross the network "
            "in the clear, and anyone on the path can plant objects",
            "use https://<rgw_dns_name>:443 (a private CA: kvceph_s3_ca_bundle); plain HTTP "
            "only in a lab (kvceph_lab = True)",
        )
    engine = lmcache = None
    if inference:
        engine = engine_settings(r, ACCELERATOR_OF_GROUP[inference[0]])
        lmcache = lmcache_settings(r, engine)
        tier = lmcache.tier.connector if lmcache.tier else None
        if engine.profile.mp and tier != "kvceph":
            # The stock s3 adapter in MP is virtual-hosted only, unchecked, and turns itself
            # off for good after 3 errors: not rendered (docs/design.md "MP mode").
            raise r.fail(
                "kvceph_lmcache_connector",
                tier,
                "MP mode renders only kvceph's S3 core as the LMCache server's L2",
                "set kvceph_lmcache_connector = kvceph, or use an in-process profile",
            )
    secure = security.load(r)
    if engine is not None:
        engine_env.check(r, engine, secure.guard)
    # Used by the RGW stage only, after the pools stage ran: checked here, before any stage.
    ceph_name = r.raw("kvceph_ceph_hostname", None)
    if ceph_name is not None and not (
        isinstance(ceph_name, str) and re.fullmatch(HOSTNAME, ceph_name)
    ):
        raise r.fail(
            "kvceph_ceph_hostname",
            ceph_name,
            "is not a host name",
            "use the name `ceph orch host ls` shows",
        )
    settings = HostSettings(
        host=host,
        groups=groups,
        ceph=ceph_settings(r) if "ceph_admin" in groups else None,
        rgw=rgw,
        s3=s3,
        engine=engine,
        lmcache=lmcache,
        lock_stale_after=r.int("kvceph_lock_stale_after", 3600, lo=60),
        verify=verify_settings(r),
        security=secure,
        probe=probe_settings(r),
        run=run_control.load(r),
        monitoring=monitoring.load(r) if monitoring.GROUP in groups else None,
        router=router.load(r) if router.GROUP in groups else None,
        lab=lab,
    )
    ports.check(settings)
    given = tuple((k, repr(r.peek(k))) for k in keys.data_keys(data) if k.startswith(keys.PREFIX))
    return dataclasses.replace(settings, given=given, read_keys=frozenset(r.read))
