"""Ceph and RGW settings: the pools, the RGW service and its ingress."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deploys.settings import kinds, security
from deploys.settings.reader import Reader
from deploys.settings.secrets import Secret

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
    # pg_autoscale_mode kvceph gives the pool (AUTOSCALE_MODES); see DEFAULT_AUTOSCALE_MODE
    autoscale_mode: str = "off"


@dataclass(frozen=True)
class CephSettings:
    pools: tuple[PoolSettings, ...]
    connect_timeout: int
    command_timeout: int
    warn_min_size_one: bool


# Ceph's pg_autoscale_mode values. kvceph's default is "off" for its pools: the autoscaler is
# on by default since Octopus and sizes a pool by the data it holds, so it would merge the
# seed's 2048 data PGs of an empty cache down to 32 and split them back as the cache fills:
# PG churn (peering, backfill) under the KV traffic, and the seed's measured count lost.
# "bulk" starts a pool at its full PG count but still lets the autoscaler move it with the
# cluster's capacity and target ratios; "off" per pool keeps exactly the count kvceph set
# while the rest of the cluster keeps its autoscaler.
AUTOSCALE_MODES = ("off", "warn", "on")
DEFAULT_AUTOSCALE_MODE = "off"


def _pool(r: Reader, index: int, raw: Any, default_mode: str) -> PoolSettings:
    key = f"kvceph_ceph_pools[{index}]"
    if not isinstance(raw, Mapping):
        raise r.fail(key, raw, "must be a dict", "use {'name': ..., 'pg_num': ...}")
    known = {"name", "pg_num", "size", "min_size", "application", "type", "autoscale_mode"}
    unknown = set(raw) - known
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
    mode = raw.get("autoscale_mode", default_mode)
    if mode not in AUTOSCALE_MODES:
        raise r.fail(f"{key}.autoscale_mode", mode, "unknown", f"use one of {AUTOSCALE_MODES}")
    return PoolSettings(name, pg, size, min_size, app, ptype, mode)


# Seed values: data pool 2048 PGs size 2 min_size 1, index pool 64 PGs.
DEFAULT_POOLS = [
    {"name": "default.rgw.buckets.data", "pg_num": 2048, "size": 2, "min_size": 1},
    {"name": "default.rgw.buckets.index", "pg_num": 64},
]


def ceph_settings(r: Reader) -> CephSettings:
    mode = r.choice("kvceph_ceph_autoscale_mode", DEFAULT_AUTOSCALE_MODE, AUTOSCALE_MODES)
    raw_pools = r.list("kvceph_ceph_pools", DEFAULT_POOLS)
    pools = tuple(_pool(r, i, p, mode) for i, p in enumerate(raw_pools))
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
    # kvceph_rgw_ingress_virtual_ips (or the one kvceph_rgw_ingress_virtual_ip): IP/prefix each;
    # () = no ingress
    ingress_virtual_ips: tuple[str, ...]
    ingress_frontend_port: int
    dns_name: str
    # kvceph_rgw_exit_timeout_secs: how long a stopping radosgw drains (None: the cluster's own)
    exit_timeout_secs: int | None = None
    # kvceph_rgw_ingress_ssl_pem: the ingress's certificate chain and private key (haproxy
    # terminates TLS); the key is a Secret, compared with the cluster's by hash only
    ingress_ssl_cert: str | None = None
    ingress_ssl_key: Secret | None = None
    # kvceph_rgw_config_section: where kvceph sets its RGW options (None: see config_section)
    config_section_setting: str | None = None

    @property
    def service_name(self) -> str:
        return f"rgw.{self.service_id}"

    @property
    def ingress_key(self) -> str:
        """The setting that gave the ingress addresses, as messages name it."""
        many = len(self.ingress_virtual_ips) > 1
        return "kvceph_rgw_ingress_virtual_ips" if many else "kvceph_rgw_ingress_virtual_ip"

    @property
    def ingress_shown(self) -> str:
        """The ingress addresses as messages show them: ``10.0.0.100/24, 10.0.0.101/24``."""
        return ", ".join(self.ingress_virtual_ips)

    @property
    def config_section(self) -> str:
        """The config section of kvceph's RGW daemons: cephadm names them
        ``client.rgw.<service id>.<host>.<random>`` and Ceph applies a section to every name
        it prefixes, so ``client.rgw.<service id>`` reaches kvceph's daemons and no other
        service's. An external RGW's daemon names are the operator's: ``client.rgw`` unless
        kvceph_rgw_config_section names them."""
        if self.config_section_setting:
            return self.config_section_setting
        return f"client.{self.service_name}" if self.managed_by == "cephadm" else "client.rgw"


def ingress_virtual_ips(r: Reader) -> tuple[str, ...]:
    """The ingress's virtual IPs: ``kvceph_rgw_ingress_virtual_ips`` (a list: cephadm's
    ``virtual_ips_list``, keepalived holding each on its own rgw host) or
    ``kvceph_rgw_ingress_virtual_ip`` (one: ``virtual_ip``), never both; () without an ingress.

    One VIP puts every engine's traffic through the one haproxy (and NIC, and TLS) of the host
    holding it; one VIP per rgw host spreads it over all of them, and a stopped host's VIP
    moves to another (cephadm makes each host MASTER of one VIP, BACKUP of the others).
    """
    one = r.opt_str("kvceph_rgw_ingress_virtual_ip")
    many = r.raw("kvceph_rgw_ingress_virtual_ips", None)
    if one is not None and many is not None:
        raise r.fail(
            "kvceph_rgw_ingress_virtual_ips",
            many,
            "is set together with kvceph_rgw_ingress_virtual_ip",
            "keep one of the two keys (cephadm refuses a spec with both)",
        )
    if many is None:
        if one is None:
            return ()
        return (_vip(r, "kvceph_rgw_ingress_virtual_ip", one, "10.67.67.100/24"),)
    key, example = "kvceph_rgw_ingress_virtual_ips", "['10.67.67.100/24', '10.67.67.101/24']"
    many = r.list(key)
    if not many:
        raise r.fail(key, many, "is empty", "list one address per rgw host, or drop the key")
    for vip in many:
        if not isinstance(vip, str):
            raise r.fail(key, vip, "is not a string", f"use {example}")
        _vip(r, key, vip, example)
    bare = [str(ipaddress.ip_interface(v).ip) for v in many]
    if len(set(bare)) != len(bare):
        raise r.fail(key, many, "lists an address twice", "list each VIP once")
    if len({ipaddress.ip_interface(v).version for v in many}) > 1:
        raise r.fail(key, many, "mixes IPv4 and IPv6", "list VIPs of one family")
    if len({ipaddress.ip_interface(v).network.prefixlen for v in many}) > 1:
        raise r.fail(
            key, many, "mixes prefixes (each VIP's subnet picks its interface)",
            "give every VIP its subnet's prefix, e.g. /24",
        )  # fmt: skip
    return tuple(many)


def _vip(r: Reader, key: str, vip: str, example: str) -> str:
    """One VIP: an IP/prefix (reader.ip) keepalived can hold (kinds.vip_problem)."""
    r.ip(key, vip, example, prefix=True)
    problem = kinds.vip_problem(vip)
    if problem:
        raise r.fail(key, vip, problem, f"use e.g. {example}")
    return vip


def rgw_settings(r: Reader) -> RgwSettings:
    networks = r.cidrs("kvceph_rgw_networks", ["10.67.67.0/24"])
    vips = ingress_virtual_ips(r)
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
        label=r.str("kvceph_rgw_label", "kvceph-rgw", pattern=r"[A-Za-z0-9_.\-]+"),
        networks=networks,
        frontend_port=r.port("kvceph_rgw_frontend_port", 8080),
        concentrator=concentrator,
        concentrator_port=r.port("kvceph_rgw_concentrator_port", 80),
        ingress_virtual_ips=vips,
        ingress_frontend_port=r.port("kvceph_rgw_ingress_frontend_port", 80),
        dns_name=dns,
        exit_timeout_secs=r.opt_int("kvceph_rgw_exit_timeout_secs", lo=1, hi=3600),
        config_section_setting=r.opt_str("kvceph_rgw_config_section"),
    )
    section = rgw.config_section_setting
    if section is not None and not re.fullmatch(r"client\.rgw(\.[A-Za-z0-9_\-]+)*", section):
        raise r.fail(
            "kvceph_rgw_config_section",
            section,
            "is not an RGW config section",
            "use client.rgw.<name> (the daemons' name, or a dotted prefix of it)",
        )
    pem = r.opt_str("kvceph_rgw_ingress_ssl_pem")
    if pem is not None:
        cert, key = security.read_tls_pem(r, "kvceph_rgw_ingress_ssl_pem", pem)
        rgw = dataclasses.replace(rgw, ingress_ssl_cert=cert, ingress_ssl_key=key)
    if rgw.concentrator and rgw.concentrator_port == rgw.frontend_port:
        raise r.fail(
            "kvceph_rgw_concentrator_port",
            rgw.concentrator_port,
            "equals kvceph_rgw_frontend_port",
            "give haproxy and RGW different ports",
        )
    return rgw
