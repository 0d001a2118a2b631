"""Scripted host answers for the ``@fake`` inventories (fake_fresh.py, fake_converged.py).

pyinfra's fake connector answers every command with the first ``fake_responses`` entry whose
key is a substring (or ``re.compile`` pattern) of the command; unmatched commands succeed with
no output. This module builds those tables for two cluster states:

- ``fresh``: nothing of kvceph exists (RGW's own pools only, no user/bucket, blank inference
  hosts: no service user, no venv, no files, service not installed);
- ``converged``: everything as a completed run leaves it; file hashes and the running digest
  are computed here with ``deploys.render`` from the same settings the deploy reads, so the
  scenario stays converged when templates or settings change.

Ceph answers reuse the outputs captured from a real Pacific 16.2.15 cluster in
``tests/facts/*/*.json``; the Ceph version is Tentacle so the cephadm concentrator spec path
is planned. Every key of a response below names the fact whose command it answers.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


from deploys import paths, render, s3_names, settings  # noqa: E402
from deploys.access import engine_users  # noqa: E402
from deploys.cluster import bucket_policy, cache_trim, ownership  # noqa: E402
from deploys.operations import s3  # noqa: E402
from deploys.operations.files import sha256_text  # noqa: E402
from deploys.settings import (  # noqa: E402
    group_data,  # noqa: E402
    secrets,  # noqa: E402
)
from deploys.settings.inventory import check_inventory  # noqa: E402
from deploys.stages import rgw_service, s3_tier  # noqa: E402
from deploys.tier import connector_package  # noqa: E402

FACTS = REPO / "tests" / "facts"
MON_TIMEOUT = "[errno 110] RADOS timed out (error connecting to the cluster)"

# Distinctive fake keys: the test asserts the secret appears nowhere in pyinfra's output.
FAKE_ACCESS_KEY = "KVFAKEACCESSKEY0001"
FAKE_SECRET_KEY = "kvfake-SECRET-9f3c1e7a-never-print-me"
FAKE_API_KEY = "kvfake-APIKEY-4d2b8e61-never-print-me"
FAKE_HF_TOKEN = "hf_kvfakeTOKEN7c1a93never0print0me"
# Each cache group's engine keys (kvceph_cache_group gpu / gaudi, as inventories/lab.py names
# them); FAKE_ACCESS_KEY / FAKE_SECRET_KEY are the bucket owner's (the admin user's).
FAKE_GROUP_KEYS = {
    "gpu": ("KVFAKEGPUACCESS0001", "kvfake-GPU-SECRET-1b7e-never-print-me"),
    "gaudi": ("KVFAKEGAUDIACCESS01", "kvfake-GAUDI-SECRET-5c2a-never-print-me"),
}

# Hosts and groups as inventories/lab.py has them (ceph1 admin + rgw; two NVIDIA hosts in one
# cache group; the Gaudi host on vLLM 0.26 with TP=1: its own cache group).
GROUPS = {
    "ceph_admin": ["@fake/ceph1"],
    "rgw": ["@fake/ceph1"],
    "gpu": ["@fake/gpu1", "@fake/gpu2"],
    "gaudi": ["@fake/gaudi1"],
}

# group_data/lab.py's engine profile without the lab engine's device ledger and its KV and S3
# emulation flags (these hosts run nothing).
_LAB_PROFILE = group_data.read(["lab"])["kvceph_engine_profile"]
LAB_PROFILE = {
    **{k: v for k, v in _LAB_PROFILE.items() if k not in ("env", "extra_args")},
    "extra_args": ["--vllm-version", _LAB_PROFILE["vllm_version"]],
}

# The lab profile in LMCache's MP mode on vLLM 0.34 (issue 51): what a fleet rolls to and from.
MP_LAB_PROFILE = {
    **LAB_PROFILE,
    "mode": "mp",
    "vllm_version": "0.34.0",
    "extra_args": ["--vllm-version", "0.34.0"],
}

# Settings like group_data/lab.py, as host data (host data outranks the repo's group_data,
# which pyinfra also loads when run from the repo root). Wildcard DNS off: /etc/hosts entry.
COMMON = {
    # A fake of the built-in lab: plain-HTTP S3 and the public seed allowed, as there.
    "kvceph_lab": True,
    "fake_delay": 0,
    "fake_delay_jitter": 0,
    "kvceph_ceph_pools": [
        {"name": "default.rgw.buckets.data", "pg_num": 32, "size": 1, "min_size": 1},
        {"name": "default.rgw.buckets.index", "pg_num": 8, "size": 1, "min_size": 1},
    ],
    "kvceph_ceph_connect_timeout": 5,
    "kvceph_rgw_managed_by": "cephadm",
    "kvceph_rgw_networks": ["10.213.7.0/24"],
    "kvceph_rgw_dns_name": "s3.kvlab",
    "kvceph_s3_endpoint": "http://s3.kvlab:80",
    "kvceph_s3_endpoint_ip": "10.213.7.11",
    "kvceph_s3_wildcard_dns": False,
    "kvceph_s3_admin_endpoint": "http://127.0.0.1:80",
    "kvceph_s3_quota_max_size_gb": 4,
    # A hub model names its commit (preflight refuses it unpinned).
    "kvceph_model_revision": "0123456789abcdef0123456789abcdef01234567",
    "kvceph_engine_wheelhouse": None,
    "kvceph_engine_profile": LAB_PROFILE,
    # The lab's KV size and simulated S3 path; LMCache's buffer and timeouts are derived.
    "kvceph_kv_bytes_per_token": 128,
    "kvceph_kv_load_gb_per_s": 0.001,
    "kvceph_prefill_tokens_per_s": 5000,
    "kvceph_health_timeout": 60,
}
PER_HOST = {
    # The orchestrator knows the host by its own name, not the inventory's "@fake/ceph1".
    "@fake/ceph1": {"kvceph_ceph_hostname": "ceph1"},
    "@fake/gaudi1": {
        "kvceph_tensor_parallel_size": 1,
        "kvceph_engine_profile": {
            **LAB_PROFILE,
            "name": "lab-engine-gaudi",
            "vllm_version": "0.26.0",
            "extra_args": ["--vllm-version", "0.26.0"],
        },
    },
}
PCI = {
    "nvidia": ["pci 0x8086", "pci 0x10de", "pci 0x10de", "tool nvidia-smi"],
    "gaudi": ["pci 0x8086", "pci 0x1da3", "tool hl-smi"],
}
_HL_SMI_IDLE = (REPO / "tests/fixtures/hl-smi/idle-2x-1.17.1.txt").read_text().splitlines()
ACCELERATOR_TOOL = {
    # the H200's recorded line, once per GPU of the fake host's PCI bus (two: TP 2)
    "nvidia": [*["tool NVIDIA H200, 143771 MiB, 580.159.04"] * 2, "tool_rc 0", "apps_rc 0"],
    "gaudi": [
        *(f"tool {i}, HL-225, 1.24.1-78932ae" for i in range(2)),
        "tool_rc 0",
        *(f"apps {line}" for line in _HL_SMI_IDLE),
        "apps_rc 0",
    ],
}
TENTACLE = "ceph version 20.2.0 (69f84cc2651aa259a15bc192ddaabd3baba07489) tentacle (stable)"
OS_RELEASE_PYTHON = "3.11.2"


def fake_env() -> dict[str, str]:
    """The fake secrets as the controller's environment carries them."""
    env = {
        secrets.ADMIN_ACCESS_ENV: FAKE_ACCESS_KEY,
        secrets.ADMIN_SECRET_ENV: FAKE_SECRET_KEY,
        secrets.API_KEY_ENV: FAKE_API_KEY,
        secrets.HF_TOKEN_ENV: FAKE_HF_TOKEN,
    }
    for group, (access, secret) in FAKE_GROUP_KEYS.items():
        env[secrets.group_access_env(group)] = access
        env[secrets.group_secret_env(group)] = secret
    return env


def export_fake_credentials() -> None:
    """In the pyinfra process only: the deploy's preflight reads the keys from the environment."""
    for name, value in fake_env().items():
        os.environ.setdefault(name, value)


def credentials() -> secrets.S3Credentials:
    """The keys the deploy will read: the exported ones, else the fake ones."""
    env = dict(os.environ)
    for name, value in fake_env().items():
        env.setdefault(name, value)
    return secrets.load(environ=env)


# --- What the deploy will see as host data ------------------------------------------------------


def _group_data_file(name: str) -> dict:
    # pyinfra execs group_data/<group>.py and keeps its public, non-module names.
    path = REPO / "group_data" / f"{name}.py"
    if not path.is_file():
        return {}
    scope: dict = {"__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    return {
        k: v for k, v in scope.items() if not k.startswith("_") and not isinstance(v, ModuleType)
    }


@dataclass(frozen=True)
class Layout:
    """One scenario: the inventory file's group name, the cluster state, lab variations."""

    scenario: str  # the inventory file name: pyinfra makes it a group of every host
    converged: bool
    extra_rgw: tuple[str, ...] = ()  # more RGW hosts (inventory names "@fake/<cephadm name>")
    engine_preinstalled: bool = False  # the image ships the engine: kvceph_engine_install False
    # Out-of-band drift on a converged host, then a hand restart (the digest is unchanged):
    yaml_drift: tuple[str, ...] = ()  # lmcache.yaml edited to chunk_size 512
    env_drift: tuple[str, ...] = ()  # vllm.env edited to PYTHONHASHSEED=68
    rgw_down: bool = False  # RGW stopped: haproxy answers 503 "No server is available"
    mon_down: bool = False  # no mon answers: every ceph call times out (exit 1)
    # Hosts with kvceph_lmcache_connector "kvceph"; every other inference host pins "lmcache"
    # (the scenarios were recorded with the stock connector; kvceph's is the product default).
    kvceph_connector: tuple[str, ...] = ()
    monitoring: tuple[str, ...] = ()  # hosts of group monitoring (the operator's Prometheus)
    # Hosts whose engine was written and started with vLLM 0.26.0 on the fleet's seed: the
    # profile's 0.33 is another key scheme (deploys/engine/upgrade.py).
    old_scheme: tuple[str, ...] = ()
    # Hosts the inventory puts in MP mode (MP_LAB_PROFILE, kvceph's connector), and hosts whose
    # engines were written and started in MP mode (their lmcache-server.service too): one
    # without the other is a roll between in-process and MP, either way.
    mp: tuple[str, ...] = ()
    ran_mp: tuple[str, ...] = ()
    # Hosts holding kvceph's two older venvs (marked, the oldest first), a digest-named
    # directory an operator made (no marker), and a wheel no venv's lock names.
    old_venvs: tuple[str, ...] = ()

    @property
    def groups(self) -> dict[str, list[str]]:
        extra = {"monitoring": list(self.monitoring)} if self.monitoring else {}
        return {**GROUPS, "rgw": GROUPS["rgw"] + list(self.extra_rgw), **extra}

    @property
    def hosts(self) -> list[str]:
        return sorted({h for members in self.groups.values() for h in members})

    def host_groups(self, host: str) -> list[str]:
        return [g for g, members in self.groups.items() if host in members] + [self.scenario]

    def host_data(self, host: str) -> dict:
        """The inventory's own data for one host (fake_responses added by ``inventory``)."""
        data = {**COMMON, **PER_HOST.get(host, {})}
        if host in self.extra_rgw:
            data["kvceph_ceph_hostname"] = host.split("/", 1)[1]
        if self.engine_preinstalled:
            data["kvceph_engine_install"] = False
        if host in GROUPS["gpu"] + GROUPS["gaudi"]:
            stock = host not in self.kvceph_connector
            data["kvceph_lmcache_connector"] = "lmcache" if stock else "kvceph"
        for group in FAKE_GROUP_KEYS:
            if host in GROUPS.get(group, ()):
                data["kvceph_cache_group"] = group
        if host in self.mp:
            data["kvceph_engine_profile"] = MP_LAB_PROFILE
            data["kvceph_lmcache_connector"] = "kvceph"
        elif self.mp and host not in GROUPS["gpu"] + GROUPS["gaudi"]:
            # Read on inference hosts only: the placement check refuses a value none of them has.
            data.pop("kvceph_engine_profile")
        return data

    def running_settings(self, host: str) -> settings.HostSettings:
        """The settings the host's engines were written and started with (``ran_mp``: MP)."""
        data = self.merged_data(host)
        if host in self.ran_mp:
            data["kvceph_engine_profile"] = MP_LAB_PROFILE
            data["kvceph_lmcache_connector"] = "kvceph"
        elif host in self.mp:
            data["kvceph_engine_profile"] = {**COMMON, **PER_HOST.get(host, {})}[
                "kvceph_engine_profile"
            ]
        return settings.load(data, host, self.host_groups(host))

    def merged_data(self, host: str) -> dict:
        """What pyinfra merges: all.py, each group's file in the host's group order, host data."""
        data = _group_data_file("all")
        for group in self.host_groups(host):
            data.update(_group_data_file(group))
        data.update(self.host_data(host))
        return data

    def host_settings(self, host: str) -> settings.HostSettings:
        return settings.load(self.merged_data(host), host, self.host_groups(host))


# --- Answers -----------------------------------------------------------------------------------


class _Restarting(dict):
    """``orch ps`` of one running daemon whose start time is new at every look: a static fake
    cannot see `orch restart` happen, so every read shows the daemon started again."""

    def __init__(self, daemon: str, ports: list[int]):
        super().__init__(stdout=[])
        self.daemon, self.ports, self.looks = daemon, ports, 0

    def get(self, key, default=None):
        if key != "stdout":
            return super().get(key, default)
        self.looks += 1
        started = f"2026-12-01T03:00:{self.looks % 60:02d}.000000Z"
        # Seen by the orchestrator after the spec was stored (FAKE_CREATED), on its port.
        daemon = {"daemon_name": self.daemon, "status_desc": "running", "started": started}
        return [json.dumps([{**daemon, "last_refresh": started, "ports": self.ports}])]


FAKE_CREATED = "2026-12-01T02:00:00.000000Z"
FAKE_FSID = "5b6c1c2e-8f0a-11f0-9d3b-525400c0ffee"


def _captured(fact_dir: str, case: str) -> list[str]:
    return json.loads((FACTS / fact_dir / f"{case}.json").read_text())["output"]


def _stat(path: str, user: str, group: str, mode: str, kind: str = "-") -> list[str]:
    """``files.File``/``files.Directory`` (GNU stat line); mode like ``rw-r-----``."""
    return [
        f"user={user} group={group} mode={kind}{mode} atime=1796000000 mtime=1796000000 "
        f"ctime=1796000000 size=4096 '{path}'"
    ]


def _mode_string(octal: str) -> str:
    bits = int(octal, 8)
    return "".join(c if bits & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))


def _exists(path: str) -> str:
    # Key of files.File / files.Directory (one command for both; process() checks the type).
    return f"test -e {path} ||"


def _sha256(path: str) -> str:
    # Key of files.Sha256File.
    return f"sha256sum {path} 2>"


def _file(path: str, content: str, user: str, group: str, mode: str) -> dict:
    return {
        _exists(path): _stat(path, user, group, _mode_string(mode)),
        _sha256(path): [f"{sha256_text(content)}  {path}"],
    }


def _directory(path: str, user: str, group: str, mode: str) -> dict:
    return {_exists(path): _stat(path, user, group, _mode_string(mode), kind="d")}


# A settled pool's PG counts: all at pg_num (no split or merge under way).
_PG_COUNTS = (
    "pg_num",
    "pg_placement_num",
    "pg_num_target",
    "pg_placement_num_target",
    "pg_num_pending",
)


def _pools_output(me: settings.HostSettings, converged: bool) -> list[str]:
    """``ceph osd pool ls detail``: RGW's own pools (captured), plus kvceph's when converged."""
    raw = json.loads("\n".join(_captured("ceph.CephPools", "fresh_cluster")))
    if converged:
        template = raw[0]
        for i, p in enumerate(me.ceph.pools):
            pool = copy.deepcopy(template)
            pool.update(pool_id=100 + i, pool_name=p.name, size=p.size, min_size=p.min_size)
            pool.update(
                dict.fromkeys(_PG_COUNTS, p.pg_num), application_metadata={p.application: {}}
            )
            raw.append(pool)
    return ["", json.dumps(raw, separators=(",", ":"))]


def _lc_rule(rule: dict) -> dict:
    """One kvceph rule as Pacific's ``radosgw-admin lc get`` dumps it (shape of the captures)."""
    empty = {"date": "", "days": ""}
    exp = rule.get("Expiration", {}).get("Days")
    mp = rule.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation")
    return {
        "dm_expiration": False,
        "expiration": {"date": "", "days": str(exp)} if exp else empty,
        "filter": {"obj_tags": {"tagset": {}}, "prefix": ""},
        "id": rule["ID"],
        "mp_expiration": {"date": "", "days": str(mp)} if mp else empty,
        "noncur_expiration": empty,
        "noncur_transitions": {},
        "prefix": "",
        "status": "Enabled",
        "transitions": {},
    }


def lifecycle_rules(me: settings.HostSettings) -> list[dict]:
    return s3.lifecycle_rules(
        me.s3.lifecycle_rule_id, me.s3.expiration_days, me.s3.abort_multipart_days
    )


def _zone_layout_output() -> list[str]:
    """``radosgw-admin zonegroup get``, ``---``, ``zone get`` of a single-zone cluster."""
    tentacle = REPO / "tests" / "fixtures" / "ceph-tentacle-20.2.4"
    zonegroup = json.loads((tentacle / "zonegroup_default.json").read_text())
    zone = json.loads((tentacle / "zone_default.json").read_text())
    return [json.dumps(zonegroup), "---", json.dumps(zone)]


def _owned_options(me: settings.HostSettings) -> dict[str, str]:
    options = {"rgw_dns_name": me.rgw.dns_name}
    if me.rgw.exit_timeout_secs is not None:
        options["rgw_exit_timeout_secs"] = str(me.rgw.exit_timeout_secs)
    return options


def _config_dump(me: settings.HostSettings) -> list[dict]:
    """``ceph config dump`` of a converged cluster: kvceph's options in its section."""
    section = me.rgw.config_section
    return [
        {"section": section, "name": k, "value": v, "level": "advanced", "mask": ""}
        for k, v in _owned_options(me).items()
    ]


def _markers(me: settings.HostSettings, specs: list[dict], uids=()) -> dict[str, str]:
    """kvceph's markers on a cluster it converged (deploys/cluster/ownership.py): its services,
    pools, options, the admin user, each cache group's user (``uids``) and the bucket."""
    marks = {ownership.marker_key("service", s["service_name"]): "created" for s in specs}
    marks.update({ownership.marker_key("pool", p.name): "created" for p in me.ceph.pools})
    section = me.rgw.config_section
    for k, v in _owned_options(me).items():
        marks[ownership.marker_key("config", ownership.option_name(section, k))] = v
    # Users and the bucket as kvceph records them since issue 52 (fsid, the bucket's digest).
    for uid in (me.s3.admin_user, *uids):
        marks[ownership.marker_key(ownership.S3_USER, uid)] = ownership.record(
            "created", FAKE_FSID, None, FAKE_CREATED
        )
    marks[ownership.marker_key(ownership.BUCKET, me.s3.bucket)] = ownership.record(
        "created", FAKE_FSID, s3_tier.spec_digest(me, ownership.BUCKET, me.s3.bucket), FAKE_CREATED
    )
    return marks


def ceph_admin_responses(me: settings.HostSettings, layout: Layout) -> dict:
    converged = layout.converged
    creds = credentials()
    t = me.ceph.connect_timeout
    ceph = f"ceph --connect-timeout {t}"
    specs, _ = rgw_service.plan_specs(
        me.rgw,
        {"oldest": "20.2.0", "release": "tentacle", "versions": ["20.2.0"]},
        {"accepted": True, "rc": 0, "message": None},
    )
    quota = me.s3.quota_max_size_gb
    labels = [me.rgw.label] if converged else []
    orch_hosts = [{"hostname": "ceph1", "labels": ["_admin", *labels]}] + [
        {"hostname": h.split("/", 1)[1], "labels": labels} for h in layout.extra_rgw
    ]
    r: dict = {
        # CephPools, CephOsdStat, CephConfigValue: the PG budget and the pools.
        f"{ceph} osd pool ls detail": _pools_output(me, converged),
        f"{ceph} osd stat": _captured("ceph.CephOsdStat", "two_osds"),
        # CephDf: the data pool's MAX AVAIL (a derived S3 quota's base)
        f"{ceph} df": _captured("capacity.CephDf", "pacific_lab"),
        f"{ceph} config get mon mon_max_pg_per_osd": _captured(
            "ceph.CephConfigValue", "mon_max_pg_per_osd"
        ),
        f"{ceph} config get mon osd_pool_default_size": ["1"],
        # CephOrchStatus, CephVersions, CephOrchHosts, CephServiceSpec: the RGW service.
        f"{ceph} orch status": ["", '{"available": true, "backend": "cephadm"}'],
        f"{ceph} versions": [
            "",
            json.dumps({"mon": {TENTACLE: 1}, "osd": {TENTACLE: 2}, "overall": {TENTACLE: 5}}),
        ],
        f"{ceph} orch host ls": [json.dumps(orch_hosts)],
        # prerequisites.AdminPrerequisites: the tools, a client of the cluster's release.
        "for t in ceph radosgw-admin": [
            "which ceph /usr/bin/ceph",
            "which radosgw-admin /usr/bin/radosgw-admin",
            f"client {TENTACLE}",
            "boto3 yes",
        ],
        # CephSpecProbe: the dry run of the concentrator spec (an orchestrator that has them).
        f"{ceph} orch apply -i - --dry-run": _captured("ceph.CephSpecProbe", "ibm_8_1_accepted")
        + ["kvceph-orch-apply-rc=0"],
        # CephConfigDump, CephOwnershipMarkers: kvceph's RGW options and its markers.
        f"{ceph} config dump": [json.dumps(_config_dump(me) if converged else [])],
        # RgwZoneLayout: one zonegroup "default" with one zone "default" (recorded shape).
        "radosgw-admin zonegroup get": _zone_layout_output(),
        f"{ceph} config-key dump kvceph/owned/": [
            json.dumps(_markers(me, specs) if converged else {})
        ],
    }
    # CephReachable (its `|| echo` turns a failure into output)
    r[f"{ceph} health 2>&1"] = ["HEALTH_OK"]
    r[f"{ceph} fsid"] = [json.dumps({"fsid": FAKE_FSID})]  # CephFsid (ownership markers)
    for wanted in specs:
        name = wanted["service_name"]
        key = f"{ceph} orch ls --service_name {name} --export"
        # What the orchestrator exports adds its own defaults; the op compares only our keys.
        exported = {**wanted, "unmanaged": False, "status": {"running": 1}}
        r[key] = [json.dumps([exported])] if converged else ["No services reported"]
        # The read-back after `orch apply` / `orch restart` (executed runs): the service as the
        # orchestrator holds it once applied, all its daemons running.
        status = {"running": 1, "size": 1, "created": FAKE_CREATED}
        listed = {**exported, "status": status, "events": []}
        r[f"{ceph} orch ls --service_name {name} -f json"] = [json.dumps([listed])]
        port = (wanted.get("spec") or {}).get("rgw_frontend_port")
        r[f"{ceph} orch ps --service_name {name} -f json"] = _Restarting(
            f"{name}.ceph1.a", [port] if port else []
        )

    # RgwUser / RgwBucket / RgwLifecycle (the runner prints one JSON line; secrets hashed).
    user = {
        "user_id": me.s3.admin_user,
        "display_name": me.s3.user_display_name,
        "suspended": 0,
        "keys": [
            {
                "access_key": creds.admin_access_key.reveal(),
                "secret_sha256": s3.secret_sha256(creds.admin_secret_key),
            }
        ],
        "bucket_quota": {
            "check_on_raw": False,
            "enabled": True,
            "max_objects": -1,
            "max_size": int((quota or 100) * 1024**3),
            "max_size_kb": int((quota or 100) * 1024**2),
        },
        # Converged: the quota kvceph set (explicit, or derived at the first deploy and kept).
        "user_quota": {
            "enabled": True,
            "max_size": int((quota or 100) * 1024**3),
            "max_objects": -1,
        },
        "max_buckets": 1000,
    }
    bucket = {
        "bucket": me.s3.bucket,
        "owner": me.s3.admin_user,
        "bucket_quota": {"enabled": False},
    }
    rules = [_lc_rule(rule) for rule in lifecycle_rules(me)]
    # RgwReachable: RGW answers HTTP at the admin endpoint (anonymous GET / -> 200).
    # More tries when the run applies the RGW spec first (fresh): the key matches any count.
    probe = rf"{re.escape(me.s3.admin_endpoint)} {s3_tier.RGW_PROBE_TIMEOUT} \d+ \d+ 2>&1"
    r[re.compile(probe)] = (
        [
            f"try {i}/{s3_tier.RGW_PROBE_TRIES}: HTTP 503 from a proxy, not RGW: "
            "503 Service Unavailable No server is available to handle this request."
            for i in range(1, s3_tier.RGW_PROBE_TRIES + 1)
        ]
        + ["unreachable"]
        if layout.rgw_down
        else ["reachable 200"]
    )
    hosts = {h: layout.host_settings(h) for h in layout.hosts}
    groups = check_inventory(list(hosts.values()))
    users = engine_users.group_users(hosts, groups)
    if converged:
        markers = _markers(me, specs, [u.uid for u in users])
        r[f"{ceph} config-key dump kvceph/owned/"] = [json.dumps(markers)]
    # Longest uid first: "--uid=lmcache-gpu" is matched before a shorter uid it starts with.
    for u in sorted(users, key=lambda u: -len(u.uid)):
        access, secret = creds.group(u.group)
        record = {
            "user_id": u.uid,
            "display_name": u.uid,
            "suspended": 0,
            "keys": [{"access_key": access.reveal(), "secret_sha256": s3.secret_sha256(secret)}],
            "bucket_quota": {"enabled": False},
            "user_quota": {"enabled": False},
            "max_buckets": -1,
        }
        r[f"--uid={u.uid}"] = [json.dumps(record, sort_keys=True) if converged else "null"]
    policy = bucket_policy.merge(None, bucket_policy.statements(me.s3.bucket, users)).document
    r["get-read-policy"] = [json.dumps(policy, sort_keys=True) if converged else "null"]
    r["radosgw-admin user info"] = [json.dumps(user, sort_keys=True) if converged else "null"]
    r["radosgw-admin bucket stats"] = [json.dumps(bucket) if converged else "null"]
    r["radosgw-admin lc get"] = [json.dumps(rules) if converged else "null"]

    if layout.mon_down:
        # No mon answers: `ceph --connect-timeout N ...` prints this on stderr and exits 1.
        failed = {"stdout": [], "stderr": [MON_TIMEOUT], "success": False}
        probe = {f"{ceph} health 2>&1": [MON_TIMEOUT, "kvceph-ceph-failed=1"]}
        r = {**probe, ceph: failed, **{k: v for k, v in r.items() if not str(k).startswith(ceph)}}
    if converged:
        r.update(_directory(paths.SCRIPT_DIR, "root", "root", "755"))
        r.update(_file(paths.ADMIN_SCRIPT, paths.ADMIN_SOURCE.read_text(), "root", "root", "0755"))
        r.update(_directory(paths.ADMIN_DIR, "root", "root", "700"))
        config = s3_tier.admin_config(me, creds.admin_access_key, creds.admin_secret_key)
        r.update(_file(paths.ADMIN_CONFIG, config, "root", "root", "0600"))
        for u in users:
            text = s3_tier.group_config(me, u.group, *creds.group(u.group))
            path = paths.GROUP_CONFIG.format(group=u.group)
            r.update(_file(path, text, "root", "root", "0600"))
        # The cache trim timer (deploys/cluster/cache_trim.py): its units, the timer enabled and
        # waiting.
        size = int((quota or 100) * 1024**3)
        service = cache_trim.service_text(me.s3.bucket, users, size, me.s3.admin_user)
        r.update(_file(cache_trim.SERVICE_PATH, service, "root", "root", "0644"))
        r.update(_file(cache_trim.TIMER_PATH, cache_trim.timer_text(), "root", "root", "0644"))
    timer = f"{cache_trim.UNIT}.timer"  # systemd's answer for a unit it does not know: dead
    r[f"--property SubState {timer}"] = [
        f"Id={timer}",
        f"SubState={'waiting' if converged else 'dead'}",
    ]
    r[f"--property UnitFileState {timer}"] = [
        f"Id={timer}",
        "UnitFileState=enabled" if converged else "UnitFileState=",
    ]
    return r


def key_seed_lines(path: str, text: str) -> list[str]:
    """``KeySeedsInUse``'s output for one env file's text (see the fact's command)."""
    lines = [f"file {path}"]
    lines += [x for x in text.splitlines() if x.startswith("KVCEPH_ENGINE_VERSIONS=")]
    seeds = [
        x.split("=", 1)[1].replace('"', "")
        for x in text.splitlines()
        if x.startswith("PYTHONHASHSEED=")
    ]
    if seeds:
        lines.append(f"seed_sha256 {sha256_text(seeds[0])}")
    return lines


def _on_vllm(me: settings.HostSettings, version: str) -> settings.HostSettings:
    """The host's settings with another vLLM in its profile (what an older deploy wrote)."""
    profile = dataclasses.replace(me.engine.profile, vllm_version=version)
    return dataclasses.replace(me, engine=dataclasses.replace(me.engine, profile=profile))


def inference_responses(me: settings.HostSettings, layout: Layout) -> dict:
    converged = layout.converged
    creds = credentials().engine(me.engine.cache_group)
    if me.host in layout.old_scheme:
        me = _on_vllm(me, "0.26.0")
    if (me.host in layout.mp) != (me.host in layout.ran_mp):
        me = layout.running_settings(me.host)
    e = me.engine
    user = e.service_user
    r: dict = {
        # server.Os (server.group/server.user branch on it), server.Which for useradd.
        "uname -s": ["Linux"],
        "command -v useradd": ["/usr/sbin/useradd"],
        "command -v groupadd": ["/usr/sbin/groupadd"],
        # engine.Accelerators: the PCI bus of the host's group.
        "/sys/bus/pci/devices/*/vendor": PCI[e.accelerator],
        # engine.MemTotal: 64 GiB, so the pinned-RAM warning stays quiet.
        "grep '^MemTotal:' /proc/meminfo": ["MemTotal:       67108864 kB"],
        # prerequisites.InferencePrerequisites: the H200's recorded nvidia-smi line
        # (hw/h200/results/2026-12-01/env.txt), or on the Gaudi host hl-smi from vendor docs
        # (tests/fixtures/hl-smi: idle devices, the driver at vllm-gaudi 0.26's 1.24.1); its
        # Python; no other compute process.
        "echo python $(python3": [
            "python 3.12.3",
            "ensurepip yes",
            f"venv {'yes' if converged else 'no'}",
            "disk_free_kib 66060288",
            # The H200 host's `uname -m` and `getconf GNU_LIBC_VERSION` (Ubuntu 24.04.3,
            # 2026-12-04).
            "machine x86_64",
            "glibc glibc 2.39",
            *ACCELERATOR_TOOL[e.accelerator],
        ],
        # engine.EngineUnits: today's single engine where the host is converged.
        "for f in /etc/systemd/system/vllm.service": (
            (["lmcache-server.service"] if me.engine.profile.mp else []) + ["vllm.service"]
            if converged
            else []
        ),
    }
    # engine.ServiceAccount: the service user and its group, where the host is converged.
    account = ["group=no"]
    if converged:
        account = [
            "group=yes",
            f"{user}:x:999:999::{e.service_home}:/usr/sbin/nologin",
            f"primary={user}",
        ]
    r[f"getent group {user}"] = account

    # connector.CompiledOps / ConnectorInstalled (before the venv's generic key: first match
    # wins): the fake engines' venv has no torch (as the lab's), and kvceph's connector where
    # the host uses it and is converged.
    r["import lmcache.cuda_ops"] = (
        _captured("connector.CompiledOps", "lab_engine_no_torch")
        if converged or layout.engine_preinstalled
        else ["novenv"]
    )
    wheel = connector_package.build()
    installed = converged and me.lmcache.tier.connector == "kvceph"
    r['d.read_text("RECORD")'] = (
        [json.dumps({"version": wheel.version, "content": wheel.content})]
        if installed
        else [json.dumps({"version": None, "content": None})]
        if converged or layout.engine_preinstalled
        else ["novenv"]
    )
    # connector.RemoteTierLog: a running engine's LMCache connected its remote tier.
    r["ExecMainStartTimestamp --timestamp=unix"] = (
        ["started", "INFO x Connection initialized/re-established at plugin://kvceph"]
        if converged
        else []
    )
    # connector.S3Disabled: a running engine whose LMCache never turned S3 off.
    r["-p InvocationID --value"] = ["started"] if converged else []
    pins = dict(p.split("==", 1) for p in e.profile.packages)  # what a finished install reports
    r[f"if test -x {e.venv}/bin/python"] = (
        [f"python {OS_RELEASE_PYTHON}"] + [f"dist {n} {v}" for n, v in pins.items()]
        if converged or layout.engine_preinstalled
        else _captured("engine.EngineVersions", "blank_node")
    )

    # engine.EngineVenvs: the profile's venv, and every engine's link to it, where converged.
    r['-*/; do [ -x "${d}bin/python" ]'] = (
        [f"venv 1764800000 {e.venv}"]
        + [f"link {e.venv_link(engine.unit)} {e.venv}" for engine in e.engines]
        if converged
        else []
    )
    if me.host in layout.old_venvs:
        r['-*/; do [ -x "${d}bin/python" ]'] += [
            *(f"venv {1764000000 + i} {e.venv_base}-{c * 12}" for i, c in enumerate("e21")),
            f"mark {e.venv_base}-{'1' * 12} 1048576",
            f"mark {e.venv_base}-{'2' * 12} 1048576",
            # The lock records of the running venv and the rollback one.
            f"need {e.venv.rsplit('/', 1)[-1]} lmcache 0.5.6",
            f"need venv-{'1' * 12} lmcache 0.5.5",
            f"wheel 4096 {paths.WHEELHOUSE}/lmcache-0.5.4-py3-none-any.whl",
        ]

    digest = render.digest(me, creds)
    aws = render.aws_dir(me)
    engine_files = {
        paths.LMCACHE_PATH: render.lmcache_yaml(me),
        f"{aws}/credentials": render.aws_credentials(me, creds),
        f"{aws}/config": render.aws_config(me),
        paths.ENV_PATH: render.env_file(me, digest),
        paths.SECRETS_PATH: render.secrets_env_file(creds).reveal(),
        paths.UNIT_PATH: render.unit(me),
        paths.GUARD_PATH: render.guard_module(),
    }
    running_env = dict(render.environment(me, digest))
    if me.host in layout.yaml_drift:
        text = engine_files[paths.LMCACHE_PATH]
        drifted = re.sub(r"(?m)^chunk_size: .*$", "chunk_size: 512", text)
        assert drifted != text, "the drift scenario needs another chunk_size"
        engine_files[paths.LMCACHE_PATH] = drifted
    if me.host in layout.env_drift:
        text = engine_files[paths.ENV_PATH]
        drifted = text.replace(f'PYTHONHASHSEED="{e.python_hash_seed}"', 'PYTHONHASHSEED="68"')
        assert drifted != text, "the drift scenario needs another PYTHONHASHSEED"
        engine_files[paths.ENV_PATH] = drifted
        running_env["PYTHONHASHSEED"] = "68"
    # engine.CacheKeyInUse: the cache-key lines of the engine's files (none on a blank host).
    key_lines = re.compile(
        r"^(chunk_size|pre_caching_hash_algorithm):|^PYTHONHASHSEED=|^ExecStart="
    )
    r["grep -E '^(chunk_size|pre_caching_hash_algorithm):"] = (
        [
            line
            for path in (paths.LMCACHE_PATH, paths.ENV_PATH, paths.UNIT_PATH)
            for line in engine_files[path].splitlines()
            if key_lines.match(line)
        ]
        if converged
        else []
    )
    # engine.KeySeedsInUse: what the default engine's env file records (nothing on a blank
    # host), as the fact's own sed/sha256sum print it.
    r["'^KVCEPH_ENGINE_VERSIONS='"] = (
        key_seed_lines(paths.ENV_PATH, engine_files[paths.ENV_PATH]) if converged else []
    )
    # engine.ServiceState: the running process's environment carries the digest and the env
    # file's variables it started with; every config file holds its desired content and none
    # changed after the start (no "newer" line).
    r["systemctl show -p ActiveState"] = (
        [
            "ActiveState=active",
            "UnitFileState=enabled",
            "MainPID=4242",
            "NeedDaemonReload=no",
            f"{render.DIGEST_VAR}={digest}",
            *(f"env {k}={v}" for k, v in running_env.items()),
            *(
                f"envsha256 {k}={sha256_text(v.reveal())}"
                for k, v in render.secret_environment(creds)
            ),
            *(f"{sha256_text(text)}  {path}" for path, text in sorted(engine_files.items())),
        ]
        if converged
        else _captured("engine.ServiceState", "not_installed")
    )
    # engine.EngineReadiness
    r["/v1/completions"] = _captured("engine.EngineReadiness", "ready" if converged else "no_venv")

    hosts_lines = render.hosts_lines(me)
    base_hosts = ["127.0.0.1 localhost", f"{me.host} {me.host}"]
    hosts_now = base_hosts + (hosts_lines if converged else [])
    # files.FileContents of /etc/hosts (files.hosts_entries), and the preflight's
    # resolver.Resolution: Debian's host.conf, glibc's answer from those lines.
    r["cat /etc/hosts ) ||"] = hosts_now
    r["kvceph-resolution"] = [
        s3_names.HOST_CONF,
        "multi on",
        s3_names.HOSTS,
        *hosts_now,
        s3_names.GETENT,
        *(
            f"{ip}   STREAM {me.s3.bucket_host}"
            for ip in (me.s3.endpoint_ips if converged or me.s3.wildcard_dns else [])
        ),
        f"{s3_names.RC}{0 if converged else 2}",
    ]

    if converged:
        r.update(_directory(e.service_home, user, user, "0750"))
        r.update(_directory(str(Path(e.venv).parent), "root", "root", "0755"))
        r.update(_directory(str(Path(e.venv_link("vllm")).parent), "root", "root", "0755"))
        r.update(_directory(paths.CONFIG_DIR, "root", "root", "0755"))
        r.update(_file(paths.LMCACHE_PATH, engine_files[paths.LMCACHE_PATH], "root", user, "0640"))
        r.update(_directory(aws, user, user, "0700"))
        r.update(
            _file(f"{aws}/credentials", engine_files[f"{aws}/credentials"], user, user, "0600")
        )
        r.update(_file(f"{aws}/config", engine_files[f"{aws}/config"], user, user, "0600"))
        r.update(_file(paths.ENV_PATH, engine_files[paths.ENV_PATH], "root", user, "0640"))
        r.update(_file(paths.UNIT_PATH, engine_files[paths.UNIT_PATH], "root", "root", "0644"))
        r.update(
            _file(paths.SECRETS_PATH, engine_files[paths.SECRETS_PATH], "root", "root", "0600")
        )
        r.update(_directory(paths.SCRIPT_DIR, "root", "root", "0755"))
        r.update(_file(paths.GUARD_PATH, engine_files[paths.GUARD_PATH], "root", "root", "0644"))
        if e.profile.mp:
            server = render.mp_server_unit(me)
            r.update(_file(paths.MP_UNIT_PATH, server, "root", "root", "0644"))
    return r


def monitoring_responses(me: settings.HostSettings, layout: Layout) -> dict:
    """A converged monitoring host holds exactly the files the stage renders (fresh: none)."""
    if not layout.converged:
        return {}
    from types import SimpleNamespace

    from deploys.monitoring import files as rendering
    from deploys.monitoring import targets
    from deploys.stages import monitoring as stage

    hosts = {h: layout.host_settings(h) for h in layout.hosts}
    checked = SimpleNamespace(hosts=hosts, credentials=credentials())
    options = stage.options(me, checked)
    addresses = {h: str(layout.host_data(h).get("ssh_hostname") or h) for h in layout.hosts}
    m = me.monitoring
    texts = rendering.rendered(
        hosts,
        addresses,
        options,
        ceph_exporters=m.ceph_exporters,
        engine_down_for=m.engine_down_for,
        haproxy_exporters=m.haproxy_exporters,
    )
    r = {**_directory(m.prometheus_dir, "root", "root", "0755")}
    r.update(_directory(f"{m.prometheus_dir}/rules", "root", "root", "0755"))
    for rel, text in texts.items():
        r.update(_file(f"{m.prometheus_dir}/{rel}", text, "root", "root", "0644"))
    key = f"{checked.credentials.vllm_api_key.reveal()}\n"
    r.update(_file(f"{m.prometheus_dir}/{targets.API_KEY_FILE}", key, "root", "prometheus", "0640"))
    r.update(_directory(m.grafana_dir, "root", "root", "0755"))
    dashboard = rendering.dashboard_text(hosts)
    r.update(_file(f"{m.grafana_dir}/kvceph.json", dashboard, "root", "root", "0644"))
    return r


def inventory(layout: Layout) -> dict[str, list]:
    """Group name -> [(host, data)] for an inventory module's globals."""
    data = {}
    for host in layout.hosts:
        me = layout.host_settings(host)
        responses: dict = {}
        if me.is_ceph_admin:
            responses.update(ceph_admin_responses(me, layout))
        if me.is_inference:
            responses.update(inference_responses(me, layout))
        if me.monitoring:
            responses.update(monitoring_responses(me, layout))
        data[host] = {**layout.host_data(host), "fake_responses": responses}
    return {g: [(h, data[h]) for h in members] for g, members in layout.groups.items()}


def groups(layout: Layout) -> dict[str, list]:
    """An inventory module's groups (``globals().update`` them), the fake keys exported first."""
    export_fake_credentials()
    return inventory(layout)
