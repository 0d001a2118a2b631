"""What kvceph owns on a Ceph cluster it shares, and what it leaves alone.

Pure. Every config option, orchestrator service, pool, RGW user and bucket kvceph creates gets
a marker in the
monitors' config-key store, ``kvceph/owned/<kind>/<name>`` (read back in one
``ceph config-key dump kvceph/owned/``, ``facts.ceph.CephOwnershipMarkers``). Neither an
option nor a service spec can carry a note of its own, and the config-key store is the one
place every Ceph release since Luminous keeps for tools, readable with the admin key kvceph
already uses. RGW users and buckets are marked there too, not on the object: that a user's
``attrs`` survive every ``radosgw-admin`` write of the user (``user modify``, ``quota set``)
is not shown on both releases, and bucket tags are readable only through S3 with the owner's
keys; markers in one place are read in one call, the same on Pacific and Tentacle.

What kvceph did not create it never changes, unless the one-run opt-in ``kvceph_adopt`` names
that very object (``--data kvceph_adopt=rgw.tenant,client.rgw.tenant/rgw_dns_name``); the plan
then shows the exact difference, and an existing service spec is merged (its realm, zone,
zonegroup, SSL and placement are kept), never replaced.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "kvceph/owned/"
ADOPT_KEY = "kvceph_adopt"
# Marker values of a service: kvceph created it (its placement is kvceph's to set), or the
# operator handed it over with kvceph_adopt (its placement stays the operator's).
CREATED = "created"
ADOPTED = "adopted"
STATES = (CREATED, ADOPTED)
# Keys of an existing RGW/ingress spec that a merge keeps whatever kvceph wants: they decide
# which zone the daemons serve, how clients reach them and where they run.
KEPT_SPEC_KEYS = (
    "rgw_realm",
    "rgw_zonegroup",
    "rgw_zone",
    "rgw_realm_token",
    "zonegroup_hostnames",
    "ssl",
    "rgw_frontend_ssl_certificate",
    "certificate_source",
    "ssl_cert",
    "ssl_key",
    "generate_cert",
)
KEPT_TOP_KEYS = ("placement", "networks", "config", "extra_container_args", "extra_entrypoint_args")


def marker_key(kind: str, name: str) -> str:
    """The config-key of one marker: ``kvceph/owned/service/rgw.standard``,
    ``kvceph/owned/config/client.rgw.standard/rgw_dns_name``."""
    return f"{PREFIX}{kind}/{name}"


def option_name(section: str, option: str) -> str:
    """An option as kvceph_adopt and messages name it: ``client.rgw.standard/rgw_dns_name``."""
    return f"{section}/{option}"


# --- what a marker records --------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """A marker's record: ``state`` (created/adopted), the cluster it was written on, the
    digest of what kvceph asked for (:func:`digest`) and when (UTC, ISO 8601). A marker from
    a kvceph before issue 52 holds the bare state: fsid, digest and time are None."""

    state: str
    fsid: str | None = None
    digest: str | None = None
    time: str | None = None


def digest(what: Mapping[str, Any]) -> str:
    """The first 16 hex digits of the SHA-256 of ``what`` as sorted JSON: the name and owner of
    a bucket, the uid and display name of a user; equal only for the same spec."""
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record(state: str, fsid: str | None, spec_digest: str | None, time: str) -> str:
    """The value written to a marker: one line of JSON (``ceph config-key get`` shows it)."""
    return json.dumps(
        {"state": state, "fsid": fsid, "digest": spec_digest, "time": time}, sort_keys=True
    )


def marker_value(state: str, fsid: str | None, spec_digest: str | None, time: str) -> str:
    """What a marker of a service or pool holds: a :func:`record`, or the bare state where the
    fsid could not be read (nothing then tells this object from a later one)."""
    return state if fsid is None else record(state, fsid, spec_digest, time)


def parse(value: str | None) -> Marker | None:
    """A marker's value as a :class:`Marker`; None when absent or not kvceph's format (a
    config option's marker holds the value kvceph set, not a record)."""
    if value in STATES:
        return Marker(value)
    try:
        data = json.loads(value) if value else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("state") not in STATES:
        return None
    return Marker(data["state"], data.get("fsid"), data.get("digest"), data.get("time"))


def mismatch(
    key: str, marker: Marker, fsid: str | None, found_digest: str | None, what: str
) -> str | None:
    """One line when ``marker`` records another cluster or another object than the one found
    (a marker restored from elsewhere, or left behind by an object removed by hand and then
    created again by someone else), else None. A record kvceph did not write a field of
    (an older marker; a digest not known for this kind) matches anything."""
    if marker.fsid and fsid and marker.fsid != fsid:
        why = f"was written on cluster {marker.fsid}, this is {fsid}"
    elif marker.digest and found_digest and marker.digest != found_digest:
        why = (
            f"records digest {marker.digest} ({marker.state} {marker.time}), the {what} found "
            f"reads {found_digest}: someone else made it after kvceph's was removed"
        )
    else:
        return None
    return (
        f"{what}: marker {key} {why}; nothing was changed; fix: if the {what} is kvceph's, "
        f"`ceph config-key rm {key}` and hand it over for one run with --data "
        f"{ADOPT_KEY}=<kind>/<name>, else point kvceph at another name"
    )


# --- RGW users and buckets --------------------------------------------------------------------

# Marker kinds of the S3 objects kvceph creates (``kvceph/owned/s3-user/lmcache``); kvceph_adopt
# names them the same way (``s3-user/lmcache``, ``bucket/lmcache``).
S3_USER = "s3-user"
BUCKET = "bucket"
_WHAT = {S3_USER: "RGW user", BUCKET: "bucket"}
_OTHER_KEY = {S3_USER: "kvceph_s3_user", BUCKET: "kvceph_s3_bucket"}


@dataclass(frozen=True)
class ObjectPlan:
    """The state the marker records once the object exists (None: the marker stands as it
    is), or a refusal."""

    marker: str | None = None
    refusal: str | None = None


def plan_object(
    kind: str,
    name: str,
    exists: bool,
    markers: Mapping[str, str],
    adopt: tuple[str, ...] = (),
    fsid: str | None = None,
    found_digest: str | None = None,
) -> ObjectPlan:
    """Whether kvceph may change an RGW user or bucket it uses (quotas, keys, lifecycle,
    policies), and the marker that records it.

    + kind: ``S3_USER`` or ``BUCKET``
    + name: the uid or bucket name
    + exists: the object exists now (``facts.rgw.RgwUser`` / ``RgwBucket`` is not None)
    + markers / adopt: as in :func:`plan_option`; ``adopt`` names ``<kind>/<name>``
    + fsid: the cluster's fsid (``facts.ceph.CephFsid``)
    + found_digest: :func:`digest` of the object found (None: not known)

    One that kvceph is about to create is marked ``created`` after it; one that exists without
    a marker is someone else's: refused, unless kvceph_adopt names it (then marked ``adopted``).
    A marker of another cluster or another object (:func:`mismatch`) is refused the same way,
    even with kvceph_adopt: the stale marker goes first (``operations.ceph.ownership_marker``
    rewrites a bare marker of an older kvceph as a record).
    """
    if not exists:
        return ObjectPlan(CREATED)
    key = marker_key(kind, name)
    handle = f"{kind}/{name}"
    mark = parse(markers.get(key))
    if mark is not None:
        stale = mismatch(key, mark, fsid, found_digest, f"{_WHAT[kind]} {name}")
        if stale:
            return ObjectPlan(refusal="S3 tier: " + stale.replace("<kind>/<name>", handle))
        return ObjectPlan()
    if handle in adopt:
        return ObjectPlan(ADOPTED)
    return ObjectPlan(
        refusal=f"S3 tier: {_WHAT[kind]} {name} exists and kvceph did not create it (no "
        f"marker {marker_key(kind, name)}); nothing was changed; fix: set {_OTHER_KEY[kind]} "
        f"to a name kvceph creates, or hand it over for one run with --data "
        f"{ADOPT_KEY}={handle} (kvceph then sets its quotas, keys, lifecycle and policies on it)"
    )


# --- config options ---------------------------------------------------------------------------


def sections_above(section: str) -> list[str]:
    """The sections whose values a daemon of ``section`` inherits, widest first: Ceph applies
    ``global``, the type and every dotted prefix of the name (``client.rgw`` reaches
    ``client.rgw.standard.ceph1.abcdef``)."""
    parts = section.split(".")
    return ["global"] + [".".join(parts[: i + 1]) for i in range(len(parts) - 1)]


@dataclass(frozen=True)
class OptionPlan:
    """What to do with one option kvceph wants: set it (and mark it), or nothing; with
    ``refusal`` nothing at all, the reason in one line."""

    set: bool
    refusal: str | None = None
    notes: list[str] = field(default_factory=list)
    was: str | None = None


def plan_option(
    section: str,
    option: str,
    wanted: str,
    dump: list[dict],
    markers: Mapping[str, str],
    adopt: tuple[str, ...] = (),
) -> OptionPlan:
    """Set ``option`` in ``section`` only where kvceph owns it (or the operator adopted it).

    + dump: ``ceph config dump`` entries (``facts.ceph.CephConfigDump``)
    + markers: kvceph's markers (``facts.ceph.CephOwnershipMarkers``)
    + adopt: the objects kvceph_adopt names

    Values in wider sections (``client.rgw``, ``global``) belong to whoever set them: kvceph's
    narrower value overrides them for its own daemons only, so they are reported, never
    touched. A narrower one (one daemon's section) would override kvceph's: a refusal.
    """
    name = option_name(section, option)
    entries = [e for e in dump if e["name"] == option]
    exact = [e for e in entries if e["section"] == section and not e.get("mask")]
    mine = markers.get(marker_key("config", name))
    notes = [
        f"{e['section']} {option} = {e['value']!r} (not kvceph's) is left alone; kvceph's "
        f"{section} value overrides it for kvceph's RGW only"
        for e in entries
        if e["section"] in sections_above(section)
    ]
    narrower = [
        f"{e['section']}{'/' + e['mask'] if e.get('mask') else ''}"
        for e in entries
        if e["section"].startswith(section + ".") or (e["section"] == section and e.get("mask"))
    ]
    if narrower:
        return OptionPlan(
            False,
            f"{', '.join(narrower)} {option} overrides kvceph's {name} for those daemons "
            f"(set outside kvceph); fix: `ceph config rm` it if kvceph's value should apply",
        )
    current = exact[0]["value"] if exact else None
    if current == wanted:
        return OptionPlan(False, None, notes, current)
    if current is None or mine == current or name in adopt:
        return OptionPlan(True, None, notes, current)
    changed = f" (changed since kvceph set {mine!r})" if mine is not None else ""
    return OptionPlan(
        False,
        f"{name} = {current!r} was set outside kvceph{changed}, kvceph wants {wanted!r}",
        notes,
        current,
    )


# --- orchestrator services --------------------------------------------------------------------


@dataclass(frozen=True)
class ServicePlan:
    """The spec to apply to one service (None: nothing), the marker to write after it (None:
    none), the differences against the cluster's spec, or a refusal."""

    spec: dict | None
    marker: str | None = None
    differences: list[str] = field(default_factory=list)
    refusal: str | None = None
    merged: bool = False  # the cluster's spec with kvceph's keys merged in (adopted)


def _summary(current: dict) -> str:
    """What makes an existing service someone else's, in a few words."""
    spec = current.get("spec") or {}
    words = [f"{k} {spec[k]}" for k in ("rgw_realm", "rgw_zonegroup", "rgw_zone") if spec.get(k)]
    if spec.get("ssl"):
        words.append("SSL")
    placement = current.get("placement") or {}
    if placement:
        words.append("placement " + ", ".join(f"{k} {v}" for k, v in sorted(placement.items())))
    return "; ".join(words) or "no kvceph marker"


def merge_spec(wanted: dict, current: dict) -> dict:
    """``current`` with kvceph's keys from ``wanted``, except what decides the zone, TLS and
    placement (``KEPT_SPEC_KEYS``, ``KEPT_TOP_KEYS``): those stay as the owner set them."""
    merged = json.loads(json.dumps(current))  # plain data, whatever mapping the fact gave
    for key, value in wanted.items():
        if key == "spec":
            inner = merged.setdefault("spec", {})
            for k, v in value.items():
                if k not in KEPT_SPEC_KEYS or k not in inner:
                    inner[k] = copy.deepcopy(v)
        elif key not in KEPT_TOP_KEYS or key not in merged:
            merged[key] = copy.deepcopy(value)
    return merged


def differences(wanted: Any, current: Any, path: str = "") -> list[str]:
    """Every difference between two specs, ``path: old -> new`` (secret values as the
    cluster's hash only, which is how the fact holds them)."""
    if isinstance(wanted, dict) and isinstance(current, dict):
        out: list[str] = []
        for key in list(current) + [k for k in wanted if k not in current]:
            sub = f"{path}.{key}" if path else key
            out += differences(wanted.get(key), current.get(key), sub)
        return out
    return [] if wanted == current else [f"{path}: {current!r} -> {wanted!r}"]


def plan_service(
    wanted: dict,
    current: dict | None,
    markers: Mapping[str, str],
    adopt: tuple[str, ...] = (),
    fsid: str | None = None,
) -> ServicePlan:
    """Create, update, adopt or refuse one orchestrator service.

    + wanted: kvceph's spec (``specs.rgw_spec`` ...)
    + current: the cluster's (``CephServiceSpec``), None when the service does not exist
    + markers / adopt: as in :func:`plan_option` (a marker is a record or a bare state)
    + fsid: the cluster's fsid; a marker written on another cluster takes nothing over
      (:func:`mismatch`; a spec's digest is recorded, not compared: kvceph changes specs)

    kvceph's own service (marker ``created``) gets kvceph's spec; an adopted one (marker
    ``adopted``, or named in kvceph_adopt) gets it merged in, keeping its zone, TLS and
    placement.
    """
    name = wanted["service_name"]
    key = marker_key("service", name)
    parsed = parse(markers.get(key))
    mark = parsed.state if parsed else None
    if current is None:
        return ServicePlan(wanted, CREATED, [])
    stale = parsed and mismatch(key, parsed, fsid, None, f"service {name}")
    if stale:
        return ServicePlan(None, refusal=stale.replace("<kind>/<name>", name))
    if mark == CREATED:
        # kvceph's own: its spec as before (keys it does not set are the orchestrator's).
        return ServicePlan(wanted, None, [])
    if mark == ADOPTED or name in adopt:
        merged = merge_spec(wanted, current)
        marker = None if mark == ADOPTED else ADOPTED
        return ServicePlan(merged, marker, differences(merged, current), merged=True)
    return ServicePlan(
        None,
        refusal=f"service {name} exists and kvceph did not create it ({_summary(current)})",
    )


def refusal_line(refusals: list[str], adopt_names: list[str]) -> str:
    """The one line that stops the run before anything changed, naming every object."""
    return (
        f"kvceph would change what it does not own: {'; '.join(refusals)}; nothing was "
        f"changed; fix: point kvceph at its own service (kvceph_rgw_service_id), or hand "
        f"these over for one run with --data {ADOPT_KEY}={','.join(adopt_names)} (the plan "
        "then shows each difference; a spec's realm/zone/SSL/placement are kept)"
    )
