"""Typed, validated settings: the one place that owns defaults and checks them.

Pure module: it reads a mapping (pyinfra's ``host.data`` or a plain dict) and never touches
pyinfra state, so deploy.py, verify.py, the tests and the lab all share it. Every error is one
line naming the host, the key, the bad value and the fix.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from deploys import engine_list, kv_sizing, model_source, security_settings, versions
from deploys.secrets import Secret

INFERENCE_GROUPS = ("gpu", "gaudi")
ACCELERATOR_OF_GROUP = {"gpu": "nvidia", "gaudi": "gaudi"}
_MISSING = object()


class SettingsError(ValueError):
    """A setting is wrong; the message is one line: host, key, value, fix."""


def _fail(host: str, key: str, value: Any, problem: str, fix: str) -> SettingsError:
    return SettingsError(f"{host}: {key} = {value!r}: {problem}; fix: {fix}")


class _Reader:
    """Typed access to ``kvceph_*`` keys of one host's data, with defaults and checks."""

    def __init__(self, data: Any, host: str):
        self.data, self.host = data, host

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        getter = getattr(self.data, "get", None)
        value = getter(key, _MISSING) if getter else _MISSING
        if value is _MISSING:
            if default is _MISSING:
                raise _fail(
                    self.host, key, None, "required setting is missing", "set it in group_data"
                )
            return default
        return value

    def fail(self, key: str, value: Any, problem: str, fix: str) -> SettingsError:
        return _fail(self.host, key, value, problem, fix)

    def str(self, key: str, default: Any = _MISSING, pattern: str | None = None) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, value, "must be a non-empty string", "set a string value")
        if value != value.strip():
            # Stray whitespace is the seed's "API returns 401" failure mode.
            raise self.fail(key, value, "has leading/trailing whitespace", "remove the spaces")
        if pattern and not re.fullmatch(pattern, value):
            raise self.fail(key, value, f"does not match {pattern}", "use an allowed value")
        return value

    def opt_str(self, key: str) -> str | None:
        value = self.raw(key, None)
        return None if value is None else self.str(key)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, value, "must be True or False", "use a Python bool")
        return value

    def int(
        self, key: str, default: Any = _MISSING, lo: int | None = None, hi: int | None = None
    ) -> int:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, value, "must be an integer", "use a whole number")
        if lo is not None and value < lo:
            raise self.fail(key, value, f"must be >= {lo}", f"use a value of at least {lo}")
        if hi is not None and value > hi:
            raise self.fail(key, value, f"must be <= {hi}", f"use a value of at most {hi}")
        return value

    def opt_int(self, key: str, lo: int | None = None, hi: int | None = None) -> int | None:
        return None if self.raw(key, None) is None else self.int(key, lo=lo, hi=hi)

    def float(self, key: str, default: Any = _MISSING, lo: float = 0.0, hi: float = 1.0) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
            raise self.fail(key, value, f"must be a number in ({lo}, {hi}]", "use e.g. 0.55")
        return float(value)

    def port(self, key: str, default: Any = _MISSING) -> int:
        return self.int(key, default, lo=1, hi=65535)

    def choice(self, key: str, default: Any, choices: Iterable[str]) -> str:
        choices = tuple(choices)
        value = self.raw(key, default)
        if value not in choices:
            raise self.fail(key, value, f"must be one of {', '.join(choices)}", "pick one of those")
        return value

    def list(self, key: str, default: Any = _MISSING) -> list:
        value = self.raw(key, default)
        if not isinstance(value, (list, tuple)):
            raise self.fail(key, value, "must be a list", "use a Python list")
        return list(value)

    def dict(self, key: str, default: Any = _MISSING) -> dict:
        value = self.raw(key, default)
        if not isinstance(value, Mapping):
            raise self.fail(key, value, "must be a dict", "use a Python dict")
        return dict(value)


# --- Ceph ------------------------------------------------------------------------------------

_POOL_NAME = r"[A-Za-z0-9_.\-]{1,128}"


@dataclass(frozen=True)
class PoolSettings:
    name: str
    pg_num: int
    size: int | None  # None: leave the cluster's default alone
    min_size: int | None
    application: str
    type: str = "replicated"


@dataclass(frozen=True)
class CephSettings:
    pools: tuple[PoolSettings, ...]
    connect_timeout: int
    command_timeout: int
    warn_min_size_one: bool


def _pool(r: _Reader, index: int, raw: Any) -> PoolSettings:
    key = f"kvceph_ceph_pools[{index}]"
    if not isinstance(raw, Mapping):
        raise r.fail(key, raw, "must be a dict", "use {'name': ..., 'pg_num': ...}")
    unknown = set(raw) - {"name", "pg_num", "size", "min_size", "application", "type"}
    if unknown:
        raise r.fail(key, sorted(unknown), "unknown pool keys", "remove them")
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(_POOL_NAME, name):
        raise r.fail(f"{key}.name", name, "is not a valid pool name", "use letters, digits, . _ -")
    pg = raw.get("pg_num")
    if isinstance(pg, bool) or not isinstance(pg, int) or pg < 1 or pg & (pg - 1):
        raise r.fail(f"{key}.pg_num", pg, "must be a power of two", "use e.g. 64, 2048")
    size, min_size = raw.get("size"), raw.get("min_size")
    for sub, v in (("size", size), ("min_size", min_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10):
            raise r.fail(f"{key}.{sub}", v, "must be an integer 1..10", "use e.g. 2")
    if size is not None and min_size is not None and min_size > size:
        raise r.fail(
            f"{key}.min_size", min_size, f"exceeds size {size}", "keep size >= min_size >= 1"
        )
    ptype = raw.get("type", "replicated")
    if ptype != "replicated":
        raise r.fail(f"{key}.type", ptype, "only replicated pools are supported", "use replicated")
    app = raw.get("application", "rgw")
    if not isinstance(app, str) or not re.fullmatch(r"[a-z0-9_]+", app):
        raise r.fail(f"{key}.application", app, "is not an application name", "use e.g. rgw")
    return PoolSettings(name, pg, size, min_size, app, ptype)


# Seed values: data pool 2048 PGs size 2 min_size 1, index pool 64 PGs.
DEFAULT_POOLS = [
    {"name": "default.rgw.buckets.data", "pg_num": 2048, "size": 2, "min_size": 1},
    {"name": "default.rgw.buckets.index", "pg_num": 64},
]


def _ceph(r: _Reader) -> CephSettings:
    pools = tuple(_pool(r, i, p) for i, p in enumerate(r.list("kvceph_ceph_pools", DEFAULT_POOLS)))
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise r.fail("kvceph_ceph_pools", names, "pool names repeat", "list each pool once")
    return CephSettings(
        pools=pools,
        connect_timeout=r.int("kvceph_ceph_connect_timeout", 10, lo=1, hi=300),
        command_timeout=r.int("kvceph_ceph_command_timeout", 60, lo=5, hi=3600),
        warn_min_size_one=r.bool("kvceph_ceph_warn_min_size_one", True),
    )


# --- RGW -------------------------------------------------------------------------------------

_DNS_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_DNS_NAME = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"


@dataclass(frozen=True)
class RgwSettings:
    managed_by: str  # "cephadm" or "external"
    service_id: str
    count_per_host: int
    label: str
    networks: tuple[str, ...]
    frontend_port: int
    concentrator: str | None
    concentrator_port: int
    ingress_virtual_ip: str | None
    ingress_frontend_port: int
    dns_name: str
    # kvceph_rgw_ingress_ssl_pem: the ingress's certificate chain and private key (haproxy
    # terminates TLS); the key is a Secret, compared with the cluster's by hash only
    ingress_ssl_cert: str | None = None
    ingress_ssl_key: Secret | None = None

    @property
    def service_name(self) -> str:
        return f"rgw.{self.service_id}"


def _rgw(r: _Reader) -> RgwSettings:
    networks = tuple(r.list("kvceph_rgw_networks", ["10.67.67.0/24"]))
    for net in networks:
        try:
            ipaddress.ip_network(net, strict=False)
        except (ValueError, TypeError):
            raise r.fail(
                "kvceph_rgw_networks", net, "is not a CIDR", "use e.g. 10.67.67.0/24"
            ) from None
    vip = r.opt_str("kvceph_rgw_ingress_virtual_ip")
    if vip is not None:
        try:
            ipaddress.ip_interface(vip)
        except ValueError:
            raise r.fail(
                "kvceph_rgw_ingress_virtual_ip", vip, "is not an IP/prefix", "use 10.67.67.100/24"
            ) from None
    concentrator = r.raw("kvceph_rgw_concentrator", "haproxy")
    if concentrator not in (None, "haproxy"):
        raise r.fail(
            "kvceph_rgw_concentrator", concentrator, "unsupported", "use 'haproxy' or None"
        )
    dns = r.str("kvceph_rgw_dns_name", "s3.cephlab.com").lower()
    if not re.fullmatch(_DNS_NAME, dns):
        raise r.fail("kvceph_rgw_dns_name", dns, "is not a DNS name", "use e.g. s3.cephlab.com")
    rgw = RgwSettings(
        managed_by=r.choice("kvceph_rgw_managed_by", "cephadm", ("cephadm", "external")),
        service_id=r.str("kvceph_rgw_service_id", "standard", pattern=r"[A-Za-z0-9_.\-]+"),
        count_per_host=r.int("kvceph_rgw_count_per_host", 4, lo=1, hi=64),
        label=r.str("kvceph_rgw_label", "rgw", pattern=r"[A-Za-z0-9_.\-]+"),
        networks=networks,
        frontend_port=r.port("kvceph_rgw_frontend_port", 8080),
        concentrator=concentrator,
        concentrator_port=r.port("kvceph_rgw_concentrator_port", 80),
        ingress_virtual_ip=vip,
        ingress_frontend_port=r.port("kvceph_rgw_ingress_frontend_port", 80),
        dns_name=dns,
    )
    pem = r.opt_str("kvceph_rgw_ingress_ssl_pem")
    if pem is not None:
        cert, key = security_settings.read_tls_pem(r, "kvceph_rgw_ingress_ssl_pem", pem)
        rgw = dataclasses.replace(rgw, ingress_ssl_cert=cert, ingress_ssl_key=key)
    if rgw.concentrator and rgw.concentrator_port == rgw.frontend_port:
        raise r.fail(
            "kvceph_rgw_concentrator_port",
            rgw.concentrator_port,
            "equals kvceph_rgw_frontend_port",
            "give haproxy and RGW different ports",
        )
    return rgw


# --- S3 --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Settings:
    endpoint: str  # as inference hosts reach RGW, e.g. http://s3.cephlab.com:80
    admin_endpoint: str  # as the Ceph admin host reaches RGW (writes go from there)
    scheme: str
    endpoint_host: str
    endpoint_port: int
    bucket: str
    region: str
    user: str
    user_display_name: str
    profile: str
    wildcard_dns: bool
    endpoint_ip: str | None
    expiration_days: int
    abort_multipart_days: int
    lifecycle_rule_id: str
    quota_max_size_gb: int | None

    @property
    def bucket_host(self) -> str:
        """Virtual-hosted name LMCache connects to (it speaks no path-style)."""
        return f"{self.bucket}.{self.endpoint_host}"

    @property
    def remote_url(self) -> str:
        return f"s3://{self.bucket_host}:{self.endpoint_port}"

    @property
    def disable_tls(self) -> bool:
        return self.scheme == "http"


def _endpoint(r: _Reader, key: str, value: str) -> tuple[str, str, int]:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise r.fail(key, value, "scheme must be http or https", "use http://host:port")
    if not parts.hostname:
        raise r.fail(key, value, "has no host", "use http://host:port")
    if parts.path not in ("", "/") or parts.query or parts.username:
        raise r.fail(key, value, "must be scheme://host:port only", "drop path, query and user")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise r.fail(key, value, "has an invalid port", "use a port 1..65535") from None
    return parts.scheme, parts.hostname, port


def _s3(r: _Reader, rgw: RgwSettings) -> S3Settings:
    endpoint = r.str("kvceph_s3_endpoint", f"http://{rgw.dns_name}:80")
    scheme, host, port = _endpoint(r, "kvceph_s3_endpoint", endpoint)
    admin = r.str("kvceph_s3_admin_endpoint", endpoint)
    _endpoint(r, "kvceph_s3_admin_endpoint", admin)
    bucket = r.str("kvceph_s3_bucket", "lmcache")
    # Virtual-hosted addressing puts the bucket into a DNS label: no dots, no capitals.
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", bucket):
        raise r.fail(
            "kvceph_s3_bucket",
            bucket,
            "is not a DNS-legal bucket name (virtual-host style)",
            "use 3-63 lowercase letters, digits and '-', no dots",
        )
    if host != rgw.dns_name and not host.endswith("." + rgw.dns_name):
        # LMCache sends Host: <bucket>.<endpoint host>; RGW only maps it to the bucket when the
        # endpoint host is its rgw_dns_name.
        raise r.fail(
            "kvceph_s3_endpoint",
            endpoint,
            f"host differs from kvceph_rgw_dns_name {rgw.dns_name!r}",
            "use the RGW DNS name as endpoint host (virtual-hosted addressing)",
        )
    wildcard = r.bool("kvceph_s3_wildcard_dns", False)
    ip = r.opt_str("kvceph_s3_endpoint_ip")
    if not wildcard and ip is None:
        raise r.fail(
            "kvceph_s3_endpoint_ip",
            None,
            "needed when kvceph_s3_wildcard_dns is False",
            "give the RGW/haproxy IP for the /etc/hosts entry, or set wildcard DNS True",
        )
    if ip is not None:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise r.fail(
                "kvceph_s3_endpoint_ip", ip, "is not an IP address", "use e.g. 10.0.0.5"
            ) from None
    quota = r.opt_int("kvceph_s3_quota_max_size_gb", lo=1)
    return S3Settings(
        endpoint=endpoint,
        admin_endpoint=admin,
        scheme=scheme,
        endpoint_host=host,
        endpoint_port=port,
        bucket=bucket,
        region=r.str("kvceph_s3_region", "default"),
        user=r.str("kvceph_s3_user", "lmcache", pattern=r"[A-Za-z0-9_.\-]+"),
        user_display_name=r.str("kvceph_s3_user_display_name", "LMCache KV cache"),
        profile=r.str("kvceph_s3_profile", "lmcache", pattern=r"[A-Za-z0-9_.\-]+"),
        wildcard_dns=wildcard,
        endpoint_ip=ip,
        expiration_days=r.int("kvceph_s3_expiration_days", 7, lo=1),
        abort_multipart_days=r.int("kvceph_s3_abort_multipart_days", 1, lo=1),
        lifecycle_rule_id=r.str("kvceph_s3_lifecycle_rule_id", "kvceph-expire"),
        quota_max_size_gb=quota,
    )


# --- Engine (software + service) ---------------------------------------------------------------

DEFAULT_PROFILES = {
    "nvidia": {
        "name": "vllm",
        "packages": ["vllm==0.33.0", "lmcache==0.5.6"],
        "executable": "vllm",
        "vllm_version": "0.33.0",
        "lmcache_version": "0.5.6",
        "extra_args": [],
        "env": {},
    },
    # vllm-gaudi validates vLLM 0.26 only; the operator provides the wheelhouse (Habana index).
    "gaudi": {
        "name": "vllm-gaudi",
        "packages": ["vllm==0.26.0", "vllm-gaudi==0.26.0", "lmcache==0.5.6"],
        "executable": "vllm",
        "vllm_version": "0.26.0",
        "lmcache_version": "0.5.6",
        "extra_args": [],
        "env": {},
    },
}

# Gaudi env: PT_HPU_GPU_MIGRATION=1 is required by LMCache on HPU (vllm_gaudi/__init__.py).
# Not taken from the seed: VLLM_SKIP_WARMUP=True (inflates the first TTFT of every bucket; a
# lab shortcut, not for production), VLLM_EXPONENTIAL_BUCKETING (deprecated; it overrides
# VLLM_BUCKETING_STRATEGY), VLLM_USE_V1 / LMCACHE_USE_EXPERIMENTAL (no effect today).
DEFAULT_GAUDI_ENV = {"PT_HPU_GPU_MIGRATION": "1"}


@dataclass(frozen=True)
class EngineProfile:
    name: str
    packages: tuple[str, ...]
    executable: str
    vllm_version: str
    lmcache_version: str
    extra_args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    @property
    def vllm_minor(self) -> str:
        return versions.minor(self.vllm_version)


@dataclass(frozen=True)
class EngineSettings:
    accelerator: str  # nvidia | gaudi, from the host's group
    accelerator_check: bool  # False in labs: no accelerator to detect
    accelerator_count: int | None
    profile: EngineProfile
    install: bool
    venv: str
    index_url: str | None
    wheelhouse: str | None  # local directory on the controller, uploaded for --no-index
    model: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    port: int
    kv_dtype: str
    python_hash_seed: int
    kv_role: str
    kv_load_failure_policy: str
    service_user: str
    service_home: str
    health_timeout: int
    extra_env: tuple[tuple[str, str], ...]
    source: model_source.ModelSource  # where the weights come from; the serve argument
    # kvceph_engines (deploys/engine_list.py); the default: one engine on every accelerator
    engines: tuple[engine_list.Engine, ...] = (engine_list.Engine("vllm", None, 8000),)
    restart_batch: int | str = 1
    restart_whole_group: bool = False
    # Seconds a restart waits for the engine to go idle (deploys/drain.py) before it cuts.
    drain_timeout: int = 120
    # kvceph_upgrade_cold_cache: an upgrade that changes the object keys may roll (upgrade.py).
    upgrade_cold_cache: bool = False

    @property
    def serve_model(self) -> str:
        """The ``vllm serve`` argument (part of every LMCache key); ``model`` is the name."""
        return self.source.serve_argument

    @property
    def kv_block_size(self) -> int:
        return versions.KV_BLOCK_SIZE[self.accelerator]


def _profile(r: _Reader, accelerator: str) -> EngineProfile:
    raw = {**DEFAULT_PROFILES[accelerator], **r.dict("kvceph_engine_profile", {})}
    key = "kvceph_engine_profile"
    unknown = set(raw) - set(DEFAULT_PROFILES["nvidia"])
    if unknown:
        raise r.fail(key, sorted(unknown), "unknown profile keys", "remove them")
    if not versions.vllm_key(raw["vllm_version"]):
        raise r.fail(
            f"{key}.vllm_version",
            raw["vllm_version"],
            "unsupported vLLM version",
            f"use one of {', '.join(versions.SUPPORTED_VLLM)}",
        )
    if not versions.lmcache_key(raw["lmcache_version"]):
        raise r.fail(
            f"{key}.lmcache_version",
            raw["lmcache_version"],
            "unsupported LMCache version",
            f"use one of {', '.join(versions.SUPPORTED_LMCACHE)}",
        )
    if not versions.pair_supported(raw["vllm_version"], raw["lmcache_version"]):
        raise r.fail(
            key,
            (raw["vllm_version"], raw["lmcache_version"]),
            "vLLM/LMCache pair not supported",
            "use a pair from deploys/versions.py SUPPORTED_PAIRS",
        )
    exe = raw["executable"]
    if not isinstance(exe, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", exe):
        raise r.fail(f"{key}.executable", exe, "must be a program name in the venv", "e.g. vllm")
    env = raw["env"] or {}
    if not isinstance(env, Mapping) or not all(
        re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(k)) for k in env
    ):
        raise r.fail(f"{key}.env", env, "must map UPPER_CASE names to values", "fix the names")
    security_settings.refuse_secret_env(r, f"{key}.env", env)
    return EngineProfile(
        name=str(raw["name"]),
        packages=tuple(str(p) for p in raw["packages"]),
        executable=exe,
        vllm_version=str(raw["vllm_version"]),
        lmcache_version=str(raw["lmcache_version"]),
        extra_args=tuple(str(a) for a in raw["extra_args"]),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
    )


def _engine(r: _Reader, accelerator: str) -> EngineSettings:
    model = r.str("kvceph_model", "Qwen/Qwen3-32B")
    tp = r.int("kvceph_tensor_parallel_size", 2, lo=1, hi=64)
    if tp & (tp - 1):
        raise r.fail(
            "kvceph_tensor_parallel_size", tp, "must be a power of two", "use 1, 2, 4 or 8"
        )
    count = r.opt_int("kvceph_accelerator_count", lo=1)
    if count is not None and tp > count:
        raise r.fail(
            "kvceph_tensor_parallel_size",
            tp,
            f"exceeds the host's {count} accelerators",
            "lower the tensor-parallel size or fix kvceph_accelerator_count",
        )
    extra_env = r.dict("kvceph_extra_env", DEFAULT_GAUDI_ENV if accelerator == "gaudi" else {})
    for k in extra_env:
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(k)):
            raise r.fail(
                "kvceph_extra_env", k, "is not an environment variable name", "use UPPER_CASE"
            )
    security_settings.refuse_secret_env(r, "kvceph_extra_env", extra_env)
    if accelerator == "gaudi" and str(extra_env.get("PT_HPU_GPU_MIGRATION")) != "1":
        raise r.fail(
            "kvceph_extra_env",
            extra_env,
            "Gaudi3 needs PT_HPU_GPU_MIGRATION=1 for LMCache",
            "add 'PT_HPU_GPU_MIGRATION': '1'",
        )
    user = r.str("kvceph_service_user", "vllm", pattern=r"[a-z_][a-z0-9_-]{0,31}")
    max_len = r.int("kvceph_max_model_len", 40960, lo=256)
    port = r.port("kvceph_vllm_port", 8000)
    return EngineSettings(
        accelerator=accelerator,
        accelerator_check=r.bool("kvceph_accelerator_check", True),
        accelerator_count=count,
        profile=_profile(r, accelerator),
        install=r.bool("kvceph_engine_install", True),
        venv=r.str("kvceph_venv", "/opt/kvceph/venv", pattern=r"/[A-Za-z0-9_./\-]+"),
        index_url=r.opt_str("kvceph_engine_index_url"),
        wheelhouse=r.opt_str("kvceph_engine_wheelhouse"),
        model=model,
        tensor_parallel_size=tp,
        gpu_memory_utilization=r.float("kvceph_gpu_memory_utilization", 0.55),
        # Qwen3-32B's native context is 40960; the seed's 131072 makes vLLM refuse to start
        # unless YaRN is configured (no --rope-scaling in 0.33) or the override env is set.
        max_model_len=max_len,
        port=port,
        # vLLM's --kv-cache-dtype values that both supported versions accept (0.33 has no
        # float16); Qwen3-32B runs in bf16, so bfloat16 equals vLLM's "auto" there.
        kv_dtype=r.choice("kvceph_kv_dtype", "bfloat16", ("bfloat16", "fp8")),
        python_hash_seed=r.int("kvceph_python_hash_seed", 67, lo=0, hi=4294967295),
        kv_role=r.choice("kvceph_kv_role", "kv_both", versions.KV_ROLES),
        # recompute: a missing/unreadable chunk falls back to prefill instead of failing requests.
        kv_load_failure_policy=r.choice(
            "kvceph_kv_load_failure_policy", "recompute", versions.KV_LOAD_FAILURE_POLICIES
        ),
        service_user=user,
        service_home=r.str(
            "kvceph_service_home", f"/var/lib/{user}", pattern=r"/[A-Za-z0-9_./\-]+"
        ),
        health_timeout=r.int("kvceph_health_timeout", 900, lo=5, hi=7200),
        drain_timeout=r.int("kvceph_drain_timeout", 120, lo=0, hi=7200),
        upgrade_cold_cache=r.bool("kvceph_upgrade_cold_cache", False),
        extra_env=tuple(sorted((str(k), str(v)) for k, v in extra_env.items())),
        source=model_source.load(r, model),
        engines=engine_list.load(r, port, tp, count),
        restart_batch=engine_list.restart_batch(r),
        restart_whole_group=r.bool(engine_list.WHOLE_GROUP_OPT_IN, False),
    )


# --- LMCache ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LMCacheSettings:
    chunk_size: int
    local_cpu: bool
    max_local_cpu_size: float | None  # GiB per worker; None: derived (deploys/kv_sizing.py)
    save_unfull_chunk: bool
    enable_async_loading: bool
    remote_serde: str
    blocking_timeout_secs: int | None  # None: derived
    hash_algorithm: str
    extra_config: tuple[tuple[str, Any], ...]
    dropped_keys: tuple[str, ...] = field(default=())  # seed keys this version ignores
    lookup_timeout_ms: int | None = None  # None: derived
    # KV bytes per token per worker; None only for a model directory until preflight reads its
    # config.json from the host. kv_source says where the figure came from.
    kv_bytes_per_token: int | None = None
    kv_source: str = ""
    load_gb_per_s: float = kv_sizing.DEFAULT_LOAD_GB_PER_S
    prefill_tokens_per_s: float = kv_sizing.DEFAULT_PREFILL_TOKENS_PER_S["nvidia"]


def _positive(r: _Reader, key: str, default: Any, example: str) -> float | None:
    value = r.raw(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise r.fail(key, value, "must be a number > 0", f"use e.g. {example}")
    return float(value)


def _kv_size(r: _Reader, engine: EngineSettings) -> tuple[int | None, str]:
    """(KV bytes per token per worker, where that figure comes from); see kv_sizing."""
    tp = engine.tensor_parallel_size
    given = r.opt_int("kvceph_kv_bytes_per_token", lo=1)
    if given is not None:
        return -(-given // tp), "kvceph_kv_bytes_per_token"
    why = kv_sizing.refusal(engine.model)
    if why:
        raise r.fail(
            "kvceph_model",
            engine.model,
            f"its KV is not layers x heads x head_dim ({why}); kvceph does not guess its size",
            "serve a model with standard attention, or set kvceph_kv_bytes_per_token",
        )
    shape = kv_sizing.KNOWN_MODELS.get(engine.model)
    if shape is not None:
        return kv_sizing.kv_bytes_per_token(shape, engine.kv_dtype, tp), "known model table"
    if engine.serve_model.startswith("/") and engine.source.source != "mirror":
        return None, "config.json"  # read from the host by preflight
    raise r.fail(
        "kvceph_kv_bytes_per_token",
        None,
        f"KV size of {engine.model!r} unknown (not in deploys/kv_sizing.py KNOWN_MODELS, not a "
        "model directory on the host)",
        "set it to layers x KV heads x head_dim x 2 x dtype bytes (whole model, TP 1)",
    )


def _lmcache(r: _Reader, engine: EngineSettings) -> LMCacheSettings:
    chunk = r.int("kvceph_lmcache_chunk_size", 256, lo=1)
    block = engine.kv_block_size
    if chunk % block:
        raise r.fail(
            "kvceph_lmcache_chunk_size",
            chunk,
            f"is not a multiple of the {engine.accelerator} KV block size {block}",
            f"use a multiple of {block}, e.g. 256",
        )
    cpu = _positive(r, "kvceph_lmcache_max_local_cpu_size", None, "6.25 (GiB), or None")
    kv_bytes, kv_source = _kv_size(r, engine)
    extra = r.dict("kvceph_lmcache_extra_config", {"s3_prefer_http2": False})
    lmc = versions.lmcache_key(engine.profile.lmcache_version)
    allowed = versions.LMCACHE_S3_EXTRA_KEYS[lmc]
    managed = {"s3_region", "disable_tls", "aws_access_key_id", "aws_secret_access_key"}
    dropped = tuple(k for k in extra if k in versions.LMCACHE_IGNORED_SEED_KEYS)
    for k in extra:
        if k in managed:
            raise r.fail(
                "kvceph_lmcache_extra_config",
                k,
                "is derived from the S3 settings",
                "remove it (keys come from the credentials file, region from kvceph_s3_region)",
            )
        if k not in allowed and k not in dropped:
            raise r.fail(
                "kvceph_lmcache_extra_config",
                k,
                f"is not read by LMCache {lmc}",
                f"use only {', '.join(sorted(allowed - managed))}",
            )
    if extra.get("save_chunk_meta", False):
        raise r.fail(
            "kvceph_lmcache_extra_config.save_chunk_meta",
            True,
            "LMCache's S3 connector requires it False",
            "set it False or drop it",
        )
    return LMCacheSettings(
        chunk_size=chunk,
        # local_cpu False: skip the local tier, go straight to S3 (cross-node sharing).
        local_cpu=r.bool("kvceph_lmcache_local_cpu", False),
        # LMCache pins this much RAM per worker even with local_cpu False (the seed's 100 GB at
        # TP=2 pins 200 GB); None: one max-length request per worker + headroom (kv_sizing).
        max_local_cpu_size=cpu,
        save_unfull_chunk=r.bool("kvceph_lmcache_save_unfull_chunk", False),
        enable_async_loading=r.bool("kvceph_lmcache_enable_async_loading", True),
        remote_serde=r.choice(
            "kvceph_lmcache_remote_serde", "naive", ("naive", "kivi", "cachegen")
        ),
        # None: derived from the longest request's KV and kvceph_kv_load_gb_per_s (kv_sizing).
        blocking_timeout_secs=r.opt_int("kvceph_lmcache_blocking_timeout_secs", lo=1),
        lookup_timeout_ms=r.opt_int("kvceph_lmcache_lookup_timeout_ms", lo=1),
        # builtin = Python hash(): depends on PYTHONHASHSEED *and* the Python minor version.
        hash_algorithm=r.choice(
            "kvceph_lmcache_hash_algorithm", "sha256_cbor", versions.HASH_ALGORITHMS
        ),
        extra_config=tuple(sorted((k, v) for k, v in extra.items() if k not in dropped)),
        dropped_keys=dropped,
        kv_bytes_per_token=kv_bytes,
        kv_source=kv_source,
        load_gb_per_s=_positive(
            r, "kvceph_kv_load_gb_per_s", kv_sizing.DEFAULT_LOAD_GB_PER_S, "0.7 (GB/s)"
        ),
        prefill_tokens_per_s=_positive(
            r,
            "kvceph_prefill_tokens_per_s",
            kv_sizing.DEFAULT_PREFILL_TOKENS_PER_S[engine.accelerator],
            "5000",
        ),
    )


# --- Verification (verify.py) -------------------------------------------------------------------
# BEGIN verify settings (owned by verify.py / deploys/verification)


@dataclass(frozen=True)
class VerifySettings:
    scheme: str  # how the controller reaches the engines' OpenAI API
    s3_endpoint: str | None  # how the controller reaches RGW; None: kvceph_s3_endpoint
    document_tokens: int
    output_tokens: int
    warm_ratio: float  # warm TTFT must be < cold TTFT x this
    fallback_tolerance: float  # fallback TTFT within cold x (1 +- this)
    request_timeout: int
    restart_timeout: int
    s3_timeout: int
    objects_timeout: int  # wait for the cold request's uploads to be listed
    clock_skew: int
    max_listed_objects: int
    cleanup: bool
    report_dir: str


def _verify(r: _Reader) -> VerifySettings:
    s3 = r.opt_str("kvceph_verify_s3_endpoint")
    if s3 is not None:
        _endpoint(r, "kvceph_verify_s3_endpoint", s3)
    return VerifySettings(
        scheme=r.choice("kvceph_verify_scheme", "http", ("http", "https")),
        s3_endpoint=s3,
        document_tokens=r.int("kvceph_verify_document_tokens", 16384, lo=256, hi=1048576),
        output_tokens=r.int("kvceph_verify_output_tokens", 32, lo=1, hi=4096),
        warm_ratio=r.float("kvceph_verify_warm_ratio", 1.0, lo=0.0, hi=1.0),
        fallback_tolerance=r.float("kvceph_verify_fallback_tolerance", 0.5, lo=0.0, hi=10.0),
        request_timeout=r.int("kvceph_verify_request_timeout", 600, lo=5, hi=7200),
        restart_timeout=r.int("kvceph_verify_restart_timeout", 180, lo=5, hi=3600),
        s3_timeout=r.int("kvceph_verify_s3_timeout", 30, lo=1, hi=600),
        objects_timeout=r.int("kvceph_verify_objects_timeout", 120, lo=1, hi=3600),
        clock_skew=r.int("kvceph_verify_clock_skew", 120, lo=0, hi=3600),
        max_listed_objects=r.int("kvceph_verify_max_listed_objects", 200000, lo=1000),
        cleanup=r.bool("kvceph_verify_cleanup", True),
        report_dir=r.str("kvceph_verify_report_dir", "reports"),
    )


# END verify settings


# --- Cache probe (probe.py) ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeSettings:
    tokens: int  # prompt tokens whose chunks each round moves (per worker: tokens // chunk_size)
    rounds: int
    timeout: int  # seconds for one host's whole probe


def _probe(r: _Reader) -> ProbeSettings:
    return ProbeSettings(
        tokens=r.int("kvceph_probe_tokens", 16384, lo=256, hi=1048576),
        rounds=r.int("kvceph_probe_rounds", 3, lo=1, hi=20),
        timeout=r.int("kvceph_probe_timeout", 600, lo=10, hi=7200),
    )


# --- Host and inventory ------------------------------------------------------------------------


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
    security: security_settings.SecuritySettings = security_settings.DEFAULTS
    probe: ProbeSettings | None = None  # likewise

    @property
    def is_inference(self) -> bool:
        return self.engine is not None

    @property
    def is_ceph_admin(self) -> bool:
        return "ceph_admin" in self.groups


def load(data: Any, host: str, groups: Iterable[str]) -> HostSettings:
    """Validate one host's data; raise SettingsError (one line) on the first problem."""
    groups = tuple(groups)
    r = _Reader(data, host)
    security_settings.refuse_secrets_in_data(r)
    inference = [g for g in INFERENCE_GROUPS if g in groups]
    if len(inference) > 1:
        raise r.fail("groups", list(groups), "host is in both gpu and gaudi", "put it in one group")
    rgw = _rgw(r)
    s3 = _s3(r, rgw)
    engine = lmcache = None
    if inference:
        engine = _engine(r, ACCELERATOR_OF_GROUP[inference[0]])
        lmcache = _lmcache(r, engine)
    return HostSettings(
        host=host,
        groups=groups,
        ceph=_ceph(r) if "ceph_admin" in groups else None,
        rgw=rgw,
        s3=s3,
        engine=engine,
        lmcache=lmcache,
        lock_stale_after=r.int("kvceph_lock_stale_after", 3600, lo=60),
        verify=_verify(r),
        security=security_settings.load(r),
        probe=_probe(r),
    )


@dataclass(frozen=True)
class CacheGroup:
    """Hosts whose object keys coincide (same model string and TP)."""

    model: str
    tensor_parallel_size: int
    hosts: tuple[str, ...]


# What must agree inside a cache group, or keys differ and nodes never reuse each other's cache.
_KEY_INVARIANTS = (
    ("kvceph_kv_dtype", lambda h: h.engine.kv_dtype),
    ("kvceph_lmcache_chunk_size", lambda h: h.lmcache.chunk_size),
    ("kvceph_lmcache_hash_algorithm", lambda h: h.lmcache.hash_algorithm),
    ("kvceph_python_hash_seed", lambda h: h.engine.python_hash_seed),
    ("kvceph_lmcache_remote_serde", lambda h: h.lmcache.remote_serde),
    ("kvceph_s3_bucket", lambda h: h.s3.bucket),
    ("kvceph_s3_endpoint", lambda h: h.s3.endpoint),
    ("kvceph_engine_profile.vllm_version", lambda h: h.engine.profile.vllm_minor),
    # The serve argument is in every key; the source and revision decide which weights it is.
    ("kvceph_model_source", lambda h: h.engine.source.source),
    ("kvceph_model_revision", lambda h: h.engine.source.revision),
    ("kvceph_model_path", lambda h: h.engine.serve_model),
)


def check_inventory(hosts: list[HostSettings]) -> list[CacheGroup]:
    """Cross-host checks; return the cache groups. Raises SettingsError (one line)."""
    admins = [h.host for h in hosts if h.is_ceph_admin]
    if len(admins) != 1:
        raise SettingsError(
            f"inventory: ceph_admin = {admins!r}: exactly one Ceph admin host is needed; "
            "fix: put one host in the ceph_admin group"
        )
    inference = [h for h in hosts if h.is_inference]
    if not inference:
        raise SettingsError(
            "inventory: gpu + gaudi = []: no inference hosts; fix: add hosts to gpu or gaudi"
        )
    groups: dict[tuple[str, int], list[HostSettings]] = {}
    for h in inference:
        groups.setdefault((h.engine.model, h.engine.tensor_parallel_size), []).append(h)
    for (model, tp), members in groups.items():
        first = members[0]
        for key, get in _KEY_INVARIANTS:
            for other in members[1:]:
                if get(other) != get(first):
                    raise SettingsError(
                        f"{other.host}: {key} = {get(other)!r} differs from {first.host}'s "
                        f"{get(first)!r} in cache group {model} TP={tp}: their cache keys would "
                        "differ and the nodes would never reuse each other's cache; "
                        "fix: use one value across the group"
                    )
    _check_roll(inference, groups)
    return [
        CacheGroup(model, tp, tuple(h.host for h in members))
        for (model, tp), members in groups.items()
    ]


def _check_roll(inference: list[HostSettings], groups) -> None:
    """One restart batch for the whole inventory, never a whole cache group at once."""
    first = inference[0]
    for key, get in (
        ("kvceph_restart_batch", lambda h: h.engine.restart_batch),
        (engine_list.WHOLE_GROUP_OPT_IN, lambda h: h.engine.restart_whole_group),
    ):
        for other in inference[1:]:
            if get(other) != get(first):
                raise SettingsError(
                    f"{other.host}: {key} = {get(other)!r} differs from {first.host}'s "
                    f"{get(first)!r}: the roll is one for the whole run; "
                    "fix: set it once, in group_data/all.py"
                )
    refusal = engine_list.roll_refusal(
        first.engine.restart_batch,
        first.engine.restart_whole_group,
        {
            f"{model} TP={tp}": sum(len(h.engine.engines) for h in members)
            for (model, tp), members in groups.items()
        },
    )
    if refusal:
        raise SettingsError(refusal)


def python_minor_mismatch(group: CacheGroup, hash_algorithm: str, pythons: Mapping[str, str]):
    """With LMCache's builtin hash, nodes on different Python minors make different keys.

    Returns an error line, or None. ``pythons`` maps host -> "3.11" (from the engine fact).
    """
    if hash_algorithm != "builtin":
        return None
    seen = {pythons[h] for h in group.hosts if h in pythons}
    if len(seen) > 1:
        detail = ", ".join(f"{h}={pythons[h]}" for h in group.hosts if h in pythons)
        return (
            f"cache group {group.model} TP={group.tensor_parallel_size}: Python minors differ "
            f"({detail}) with pre_caching_hash_algorithm builtin: keys differ across nodes; "
            "fix: use kvceph_lmcache_hash_algorithm sha256_cbor or one Python version"
        )
    return None
