"""Facts about Ceph RGW read on the Ceph admin host (``ceph`` and ``radosgw-admin``).

``radosgw-admin`` has no connect timeout of its own, so every call runs under ``timeout``
inside a small Python runner that also tells "does not exist" apart from a real error (the
exit status alone does not: Pacific answers a missing user with 22, a missing bucket with 210
or 2, a bucket without lifecycle with 254). Secret keys are hashed by the runner on the host,
so they never reach the controller, its logs or ``-vvv`` fact output.
"""

from __future__ import annotations

import json

from pyinfra.api import FactBase, QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError

from deploys.cluster import ceph_cli, zones

# Runner: argv = timeout, mode (user, bucket, usage: a bucket's stats; stats: a user's; lc),
# command...; prints one JSON line (null when the subject does not exist) or exits non-zero
# with radosgw-admin's last error line. Python 3.6 compatible.
RADOSGW_JSON = r"""
import hashlib, json, subprocess, sys
t, mode, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
try:
    out, err = p.communicate(timeout=t)
except subprocess.TimeoutExpired:
    p.kill()
    sys.exit("%s timed out after %ds" % (" ".join(cmd[:3]), t))
# stats: any failure is null (status only; a user never synced has no stats header yet)
missing = {"user": ["no user info saved"], "stats": [""],
           "bucket": ["(2002)", "could not get bucket info", "could not init bucket"],
           "usage": ["(2002)", "could not get bucket info", "could not init bucket"],
           "lc": ["could not init bucket"]}[mode]
if p.returncode:
    if any(m in err for m in missing):
        print("null")
        sys.exit(0)
    if mode == "lc" and p.returncode == 254 and not err.strip():
        print("[]")
        sys.exit(0)
    lines = [l for l in err.splitlines() if l.strip()] or ["exit status %d" % p.returncode]
    sys.exit("%s: %s" % (" ".join(cmd[:3]), lines[-1]))
data = json.loads(out)
if mode == "user":
    data = {"user_id": data["user_id"], "display_name": data.get("display_name"),
            "suspended": data.get("suspended", 0),
            "keys": [{"access_key": k["access_key"],
                      "secret_sha256": hashlib.sha256(k["secret_key"].encode()).hexdigest()}
                     for k in data.get("keys", [])],
            "bucket_quota": data.get("bucket_quota"), "user_quota": data.get("user_quota"),
            "max_buckets": data.get("max_buckets")}
elif mode == "bucket":
    data = {"bucket": data["bucket"], "owner": data["owner"],
            "bucket_quota": data.get("bucket_quota")}
elif mode == "stats":
    data = {"stats": data.get("stats"), "last_stats_update": data.get("last_stats_update")}
elif mode == "usage":
    data = {"usage": data.get("usage"), "bucket_quota": data.get("bucket_quota")}
else:
    data = [r["rule"] for r in data.get("rule_map", [])]
print(json.dumps(data, sort_keys=True))
""".strip()


def radosgw_json(timeout: int, mode: str, *args: str) -> StringCommand:
    # The outer timeout is a backstop; the runner's own one reports which command hung.
    return StringCommand(
        "timeout",
        str(timeout + 10),
        "python3",
        "-c",
        QuoteString(RADOSGW_JSON),
        str(timeout),
        mode,
        "radosgw-admin",
        *(QuoteString(a) for a in args),
    )


def _json(output) -> object:
    try:
        return json.loads("\n".join(output))
    except ValueError as exc:
        raise FactProcessError(f"radosgw-admin output is not JSON: {exc}") from None


class RgwDnsName(FactBase):
    """
    The ``rgw_dns_name`` RGW reads from the config database (``client.rgw``), or "" if unset.

    Virtual-hosted addressing (the only one LMCache speaks) maps ``<bucket>.<rgw_dns_name>``
    to the bucket; RGW reads the value when it starts.
    """

    requires_command = "ceph"

    def command(self, connect_timeout: int = 10, command_timeout: int = 60):
        return ceph_cli.ceph(
            "config",
            "get",
            "client.rgw",
            "rgw_dns_name",
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            json=False,
        )

    @staticmethod
    def default():
        return ""

    def process(self, output):
        return "\n".join(output).strip()


class _RadosgwJson(FactBase):
    """A fact the radosgw-admin runner answers: its JSON (None: the subject does not exist)."""

    requires_command = "radosgw-admin"

    def process(self, output):
        return _json(output)


class _RadosgwStatus(FactBase):
    """A status read the radosgw-admin runner answers with an object, read leniently: None for
    null (the subject is not there), another JSON value or no JSON; ``summary`` reads the rest."""

    requires_command = "radosgw-admin"

    def process(self, output):
        try:
            data = json.loads("\n".join(output))
        except ValueError:
            return None
        return self.summary(data) if isinstance(data, dict) else None

    def summary(self, data: dict):
        """The fact's value from the runner's object.

        + data: the runner's JSON object
        """
        raise NotImplementedError


class RgwUser(_RadosgwJson):
    """
    An RGW user (``radosgw-admin user info``), or None if it does not exist.

    Secret keys are replaced on the host by their SHA-256, so the fact can be logged:

    .. code:: python

        {"user_id": "lmcache", "display_name": "LMCache KV cache", "suspended": 0,
         "keys": [{"access_key": "AK", "secret_sha256": "<hex>"}],
         "bucket_quota": {"enabled": True, "max_size": 4294967296, ...}, "user_quota": {...}}
    """

    def command(self, uid: str, timeout: int = 60):
        return radosgw_json(timeout, "user", "user", "info", f"--uid={uid}")


class RgwBucket(_RadosgwJson):
    """
    A bucket's owner and bucket quota (``radosgw-admin bucket stats``), or None if missing.
    """

    def command(self, bucket: str, timeout: int = 60):
        return radosgw_json(timeout, "bucket", "bucket", "stats", f"--bucket={bucket}")


# Keys of a Pacific rule dump (``radosgw-admin lc get``) this module knows how to translate.
_RULE_KEYS = {
    "id",
    "prefix",
    "status",
    "expiration",
    "noncur_expiration",
    "mp_expiration",
    "filter",
    "transitions",
    "noncur_transitions",
    "dm_expiration",
}
_FILTER_KEYS = {"prefix", "obj_tags"}


def _days(value) -> int | None:
    return int(value) if str(value or "").strip() else None


def s3_rule(raw: dict) -> dict:
    """
    One rule of ``radosgw-admin lc get`` (Pacific) in the S3 API shape boto3 sends back.

    A rule with a field this does not know is marked ``"kvceph_untranslatable"`` so that the
    lifecycle operation refuses to rewrite it rather than silently drop that field.
    """
    rule: dict = {"ID": raw.get("id", ""), "Status": raw.get("status", "Enabled")}
    unknown = sorted(set(raw) - _RULE_KEYS) + sorted(
        f"filter.{k}" for k in set(raw.get("filter") or {}) - _FILTER_KEYS
    )
    legacy = raw.get("prefix") or ""
    flt = raw.get("filter") or {}
    prefix = flt.get("prefix") or ""
    tags = [
        {"Key": k, "Value": v}
        for k, v in sorted(((flt.get("obj_tags") or {}).get("tagset") or {}).items())
    ]
    if legacy and not prefix and not tags:
        rule["Prefix"] = legacy
    elif legacy:
        unknown.append("prefix+filter")
    elif tags and (prefix or len(tags) > 1):
        rule["Filter"] = {"And": {**({"Prefix": prefix} if prefix else {}), "Tags": tags}}
    elif tags:
        rule["Filter"] = {"Tag": tags[0]}
    else:
        rule["Filter"] = {"Prefix": prefix}

    expiration = {}
    exp = raw.get("expiration") or {}
    if _days(exp.get("days")) is not None:
        expiration["Days"] = _days(exp.get("days"))
    if exp.get("date"):
        expiration["Date"] = exp["date"]
    if raw.get("dm_expiration"):
        expiration["ExpiredObjectDeleteMarker"] = True
    if expiration:
        rule["Expiration"] = expiration
    noncur = _days((raw.get("noncur_expiration") or {}).get("days"))
    if noncur is not None:
        rule["NoncurrentVersionExpiration"] = {"NoncurrentDays": noncur}
    mp = _days((raw.get("mp_expiration") or {}).get("days"))
    if mp is not None:
        rule["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": mp}

    transitions = []
    for t in (raw.get("transitions") or {}).values():
        item = {"StorageClass": t.get("storage_class")}
        if _days(t.get("days")) is not None:
            item["Days"] = _days(t.get("days"))
        if t.get("date"):
            item["Date"] = t["date"]
        transitions.append(item)
    if transitions:
        rule["Transitions"] = transitions
    noncur_transitions = [
        {"NoncurrentDays": _days(t.get("days")), "StorageClass": t.get("storage_class")}
        for t in (raw.get("noncur_transitions") or {}).values()
    ]
    if noncur_transitions:
        rule["NoncurrentVersionTransitions"] = noncur_transitions
    if unknown:
        rule["kvceph_untranslatable"] = ", ".join(unknown)
    return rule


class BucketPolicy(FactBase):
    """
    A bucket's policy document (parsed), read with its owner's keys on the Ceph admin host
    (s3admin.py ``get-read-policy``); None when the bucket, its policy or the owner's key file
    is not there yet (a first run, a migration). The KV bucket's and the model mirror's.

    + bucket: the bucket
    + admin_script: s3admin.py on the host
    + config: the owner's private INI
    """

    def command(self, bucket: str, admin_script: str, config: str):
        return StringCommand(
            "if test -f", QuoteString(config), "; then python3", QuoteString(admin_script),
            "--config", QuoteString(config), "get-read-policy", QuoteString(bucket),
            "; else echo null; fi",
        )  # fmt: skip

    @staticmethod
    def default():
        return None

    def process(self, output):
        return json.loads("\n".join(output) or "null")


class RgwLifecycle(FactBase):
    """
    A bucket's lifecycle rules in S3 API shape (translated from ``radosgw-admin lc get``).

    Returns ``[]`` when the bucket has no lifecycle configuration and None when the bucket
    does not exist. Rules keep the order RGW stores them in (sorted by ID).
    """

    requires_command = "radosgw-admin"

    def command(self, bucket: str, timeout: int = 60):
        return radosgw_json(timeout, "lc", "lc", "get", f"--bucket={bucket}")

    def process(self, output):
        rules = _json(output)
        if rules is None:
            return None
        if not isinstance(rules, list):
            raise FactProcessError("radosgw-admin lc get: unexpected output shape")
        return [s3_rule(r) for r in rules]


# Runner: argv = url, timeout, tries, delay; one line per failed try, then "reachable <code>"
# or "unreachable". Any HTTP answer from RGW counts (anonymous GET / is 200 or 403); a proxy's
# own 502/503/504 page (haproxy: "No server is available") does not. Python 3.6 compatible.
HTTP_PROBE = r"""
import re, ssl, sys, time, urllib.error, urllib.request
url, t, tries, delay = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
# Reachability only (no credentials are sent): a lab's self-signed certificate still counts.
ctx = ssl._create_unverified_context() if url.startswith("https") else None
for i in range(1, tries + 1):
    try:
        code, body = urllib.request.urlopen(url, timeout=t, context=ctx).getcode(), ""
    except urllib.error.HTTPError as e:
        code, body = e.code, e.read(1024).decode("utf-8", "replace")
    except Exception as e:
        code, body = None, str(getattr(e, "reason", e) or type(e).__name__)
    if code is not None and (code not in (502, 503, 504) or "<Error>" in body):
        print("reachable %d" % code)
        sys.exit(0)
    if code is not None:
        text = " ".join(re.sub(r"<[^>]+>", " ", body).split())
        body = "HTTP %d from a proxy, not RGW: %s" % (code, text[:120] or "no body")
    print("try %d/%d: %s" % (i, tries, " ".join(body.split())))
    if i < tries:
        time.sleep(delay)
print("unreachable")
""".strip()
_PROBE_FAILED = "kvceph-probe-failed"


class RgwReachable(FactBase):
    """
    Whether an S3 endpoint answers HTTP from this host, with every failed try.

    RGW reads through ``radosgw-admin`` go through RADOS and keep working while RGW is down;
    this is the check that the engines' path (HTTP) works. Returns
    ``{"reachable": False, "status": None, "attempts": ["try 1/3: [Errno 111] Connection
    refused", ...]}`` (``status``: the HTTP code when reachable).
    """

    def command(self, endpoint: str, timeout: int = 5, tries: int = 3, delay: int = 2):
        bound = tries * (timeout + delay) + 5
        return StringCommand(
            "timeout",
            str(bound),
            "python3",
            "-c",
            QuoteString(HTTP_PROBE),
            QuoteString(endpoint),
            str(timeout),
            str(tries),
            str(delay),
            "2>&1",
            "||",
            "echo",
            f"{_PROBE_FAILED}=$?",
        )

    def process(self, output):
        lines = [line.strip() for line in output if line.strip()]
        attempts = [line for line in lines if line.startswith("try ")]
        last = lines[-1] if lines else ""
        if last.startswith("reachable "):
            return {"reachable": True, "status": int(last.split()[1]), "attempts": attempts}
        if last.startswith(_PROBE_FAILED):
            rc = last.split("=", 1)[1]
            why = "probe timed out" if rc == "124" else f"probe failed (exit {rc})"
            other = [line for line in lines[:-1] if not line.startswith("try ")]
            attempts.append(f"{why}: {other[-1]}" if other else why)
        return {"reachable": False, "status": None, "attempts": attempts}


_ZONE_FAILED = "kvceph-zone-failed"


class RgwZoneLayout(FactBase):
    """
    The zonegroup and zone an RGW serves (``radosgw-admin zonegroup get`` and ``zone get``),
    as deploys/cluster/zones.py reads them, or ``{"error": "<last line>"}``.

    .. code:: python

        {"zonegroup": "default", "zones": ["default"], "master_zone": "default",
         "zone": "default", "data_pool": "default.rgw.buckets.data",
         "index_pool": "default.rgw.buckets.index"}
    """

    # `zone get` carries the multi-site system user's secret key (system_key): the admin host
    # keeps only what zones.layout reads, so pyinfra never sees it.
    _ZONE_FILTER = (
        "import json,sys; z=json.load(sys.stdin); "
        "print(json.dumps({k: z.get(k) for k in ('id', 'name', 'placement_pools')}))"
    )

    def command(
        self,
        realm: str | None = None,
        zonegroup: str | None = None,
        zone: str | None = None,
        timeout: int = 60,
    ):
        where = []
        for flag, value in (("--rgw-realm", realm), ("--rgw-zonegroup", zonegroup)):
            if value:
                where += [f"{flag}={value}"]
        zone_args = where + ([f"--rgw-zone={zone}"] if zone else [])
        args = [QuoteString(a) for a in where]
        return StringCommand(
            "{", "timeout", str(timeout), "radosgw-admin", "zonegroup", "get", *args,
            "&&", "echo", "---", "&&",
            "timeout", str(timeout), "radosgw-admin", "zone", "get",
            *[QuoteString(a) for a in zone_args],
            "|", "python3", "-c", QuoteString(self._ZONE_FILTER),
            ";", "}", "||", "echo", f"{_ZONE_FAILED}=$?",
        )  # fmt: skip

    def process(self, output):
        failed = [x for x in output if x.startswith(_ZONE_FAILED)]
        if failed or "---" not in output:
            status = failed[0].split("=", 1)[1] if failed else "no answer"
            return {"error": f"`radosgw-admin zonegroup get` / `zone get` failed ({status})"}
        cut = output.index("---")
        zonegroup = json.loads("\n".join(output[:cut]))
        zone = json.loads("\n".join(output[cut + 1 :]))
        return zones.layout(zonegroup, zone)
