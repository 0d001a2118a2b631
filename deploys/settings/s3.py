"""S3 settings: the endpoint inference hosts and the admin host reach, bucket, user, lifecycle."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from deploys.cluster import capacity
from deploys.settings.ceph import RgwSettings
from deploys.settings.kinds import GIB, RGW_MAX_BYTES
from deploys.settings.reader import Reader

RGW_MAX_GIB = RGW_MAX_BYTES // GIB

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
    user: str  # the engines' users are <user>-<cache group>; <user> itself: before issue 36
    user_display_name: str
    profile: str
    wildcard_dns: bool
    # Every address of the bucket's name (one /etc/hosts line each), and where they came from
    # (the key, or the default the plan names). Empty: the rgw group's hosts (preflight).
    endpoint_ips: tuple[str, ...]
    endpoint_ips_source: str
    expiration_days: int
    abort_multipart_days: int
    lifecycle_rule_id: str
    # The engines' user quota (deploys/cluster/capacity.py): GiB, else derived from the data pool's
    # MAX AVAIL x quota_fraction, unless quota_unbounded says there is none.
    quota_max_size_gb: float | None
    quota_fraction: float = capacity.DEFAULT_FRACTION
    quota_unbounded: bool = False
    # Owns the bucket, its policy and lifecycle; its key never reaches an inference host.
    admin_user: str = "kvceph-s3-admin"

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


def endpoint_parts(r: Reader, key: str, value: str) -> tuple[str, str, int]:
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


def s3_settings(r: Reader, rgw: RgwSettings, sets_quota: bool = True) -> S3Settings:
    """One host's S3 settings; the quota keys are read on the Ceph admin host only (``sets_quota``),
    the one that sets the quota: given elsewhere only, settings/placement.py refuses them."""
    endpoint = r.str("kvceph_s3_endpoint", f"https://{rgw.dns_name}:443")
    scheme, host, port = endpoint_parts(r, "kvceph_s3_endpoint", endpoint)
    admin = r.str("kvceph_s3_admin_endpoint", endpoint)
    endpoint_parts(r, "kvceph_s3_admin_endpoint", admin)
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
    ips, source = endpoint_ips(r, rgw, wildcard)
    # At least 1 MiB (a smaller one rounds to a quota that refuses every put), at most what
    # radosgw-admin --max-size takes (bytes, int64); the fleet's DRAM buffers: capacity.plan.
    quota, unbounded, fraction = None, False, capacity.DEFAULT_FRACTION
    if sets_quota:
        quota = r.size(
            "kvceph_s3_quota_max_size_gb",
            None,
            lo=1 / 1024,
            hi=(RGW_MAX_GIB, "more than radosgw-admin --max-size takes (int64 bytes)"),
            example="2048",
        )
        unbounded = r.bool("kvceph_s3_quota_unbounded", False)
        fraction = r.float("kvceph_s3_quota_fraction", capacity.DEFAULT_FRACTION)
    if unbounded and quota is not None:
        raise r.fail(
            "kvceph_s3_quota_unbounded", True, "is set together with kvceph_s3_quota_max_size_gb",
            "keep one of the two",
        )  # fmt: skip
    return S3Settings(
        endpoint=endpoint,
        admin_endpoint=admin,
        scheme=scheme,
        endpoint_host=host,
        endpoint_port=port,
        bucket=bucket,
        region=r.str("kvceph_s3_region", "default"),
        user=r.uid("kvceph_s3_user", "lmcache"),
        user_display_name=r.str("kvceph_s3_user_display_name", "LMCache KV cache"),
        profile=r.str("kvceph_s3_profile", "lmcache", pattern=r"[A-Za-z0-9_.\-]+"),
        wildcard_dns=wildcard,
        endpoint_ips=ips,
        endpoint_ips_source=source,
        expiration_days=r.int("kvceph_s3_expiration_days", 7, lo=1),
        abort_multipart_days=r.int("kvceph_s3_abort_multipart_days", 1, lo=1),
        lifecycle_rule_id=_rule_id(r),
        quota_max_size_gb=quota,
        quota_fraction=fraction,
        quota_unbounded=unbounded,
        admin_user=r.uid("kvceph_s3_admin_user", "kvceph-s3-admin"),
    )


def _rule_id(r: Reader) -> str:
    rule = r.str("kvceph_s3_lifecycle_rule_id", "kvceph-expire")
    if len(rule) > 255:
        # S3 (and RGW) refuse a longer lifecycle rule ID when the stage puts the rule.
        raise r.fail(
            "kvceph_s3_lifecycle_rule_id",
            rule[:40] + "...",
            f"is {len(rule)} characters; S3 allows 255",
            "use a short ID, e.g. kvceph-expire",
        )
    return rule


# The plan's words for each default (deploys/preflight.py prints them).
FROM_VIP = (
    "default: the ingress VIPs (kvceph_rgw_ingress_virtual_ip/_ips), as keepalived keeps each on "
    "a live rgw host whose haproxy spreads over every RGW; the hosts' own addresses serve no S3 "
    "there"
)
FROM_RGW_GROUP = (
    "default: every host of the rgw group, as each runs a concentrator and no VIP fronts them"
)


def _rgw_address(r: Reader, key: str, ip: str, example: str) -> str:
    """An address an engine can connect to: not 0.0.0.0/::, multicast or broadcast."""
    address = ipaddress.ip_address(r.ip(key, ip, example))
    if address.is_unspecified or address.is_multicast or ip == "255.255.255.255":
        raise r.fail(
            key,
            ip,
            "is not an address a host can connect to (unspecified, multicast or broadcast)",
            "give the address an RGW (or its haproxy) listens on",
        )
    return ip


def endpoint_ips(r: Reader, rgw: RgwSettings, wildcard: bool) -> tuple[tuple[str, ...], str]:
    """The bucket name's addresses and their source.

    ``kvceph_s3_endpoint_ips`` (a list), or ``kvceph_s3_endpoint_ip`` (one address, the same
    as a list of one), never both. Neither, on a cephadm cluster: every ingress VIP when there
    is an ingress (keepalived keeps each on a live rgw host and haproxy there spreads over every
    RGW; the hosts' own addresses serve nothing on the ingress port), else with the concentrator
    every rgw host's address (filled in by the preflight, which knows the inventory: ``()``).
    With wildcard DNS the addresses are optional: given, the preflight checks DNS holds them.
    """
    one = r.opt_str("kvceph_s3_endpoint_ip")
    many = r.raw("kvceph_s3_endpoint_ips", None)
    if one is not None and many is not None:
        raise r.fail(
            "kvceph_s3_endpoint_ips",
            many,
            "is set together with kvceph_s3_endpoint_ip",
            "keep one of the two keys (kvceph_s3_endpoint_ip is a list of one)",
        )
    if many is not None:
        many = r.list("kvceph_s3_endpoint_ips")
        if not many:
            raise r.fail(
                "kvceph_s3_endpoint_ips", many, "is empty", "list at least one address or drop it"
            )
        for ip in many:
            if not isinstance(ip, str):
                raise r.fail("kvceph_s3_endpoint_ips", ip, "is not a string", "e.g. '10.0.0.5'")
            _rgw_address(r, "kvceph_s3_endpoint_ips", ip, "e.g. ['10.0.0.5', '10.0.0.6']")
        if len(set(many)) != len(many):
            raise r.fail("kvceph_s3_endpoint_ips", many, "lists an address twice", "list each once")
        if len({ipaddress.ip_address(ip).version for ip in many}) > 1:
            raise r.fail(
                "kvceph_s3_endpoint_ips",
                many,
                "mixes IPv4 and IPv6: LMCache's S3 client (awscrt) takes the addresses of each "
                "family apart, so kvceph can neither spread the load over the whole list nor "
                "check before the deploy that the resolver returns it",
                "list the RGW addresses of one family (all IPv4, or all IPv6)",
            )
        return tuple(many), "kvceph_s3_endpoint_ips"
    if one is not None:
        return (
            _rgw_address(r, "kvceph_s3_endpoint_ip", one, "e.g. 10.0.0.5"),
        ), "kvceph_s3_endpoint_ip"
    if wildcard:
        return (), "kvceph_s3_wildcard_dns"
    if rgw.managed_by == "cephadm" and rgw.ingress_virtual_ips:
        return tuple(v.split("/")[0] for v in rgw.ingress_virtual_ips), FROM_VIP
    if rgw.managed_by == "cephadm" and rgw.concentrator:
        return (), FROM_RGW_GROUP
    raise r.fail(
        "kvceph_s3_endpoint_ips",
        None,
        "needed when kvceph_s3_wildcard_dns is False and no cephadm ingress or concentrator "
        "gives the addresses",
        "list the RGW/haproxy addresses for /etc/hosts, or set wildcard DNS True",
    )
