"""Least privilege on the KV bucket: who owns it, which engine user each cache group runs as,
and the bucket policy that lets each one read and write only its own group's object names.

Pure module (no pyinfra): the S3 tier, rotate.py, preflight and the tests share it.

What LMCache needs, read in its code (0.5.6 ``s3_connector.py``; kvceph's ``connector/s3core``):

- HEAD ``/<name>`` (lookup; a miss must be a 404, else 0.5.6 logs a warning per miss),
- GET ``/<name>`` (load), PUT ``/<name>`` (store, single PutObject, no multipart),
- nothing else: 0.5.6's ``list()`` raises NotImplementedError, neither connector deletes on the
  serving path (kvceph's ``delete`` serves verify's cleanup, which runs with the admin key).

Object names: ``CacheEngineKey.to_string()`` = ``<model>@<world size>@<worker>@<hash>@<dtype>``
with every ``/`` turned into ``_`` (both connectors; the URL's percent-escaping is undone by RGW,
so the stored name holds a literal ``@``). A group's names therefore all start with
``<serve argument, / -> _>@<world size>@`` -- the prefix its policy statement names.

RGW answers HEAD/GET of a missing object with 404 only when the caller may list the bucket
(else 403, as AWS does; LMCache 0.5.6 then logs a warning per miss). RGW evaluates that
``s3:ListBucket`` without an ``s3:prefix``, so a plain ``StringLike`` prefix condition answers
every miss 403; ``StringLikeIfExists`` is what works (measured on the Pacific lab, RGW 16.2:
a miss 404; listing under its own prefix 200, under another group's 403; a listing with no
prefix at all 200 -- the one thing a group's key sees beyond its own names is the names).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

VERSION = "2012-10-17"
SID_PREFIX = "kvceph-"
# What the engines of a cache group may do on its own names (nothing else: no delete, no
# bucket, policy, lifecycle or ACL operation; RGW users of the same tenant get nothing unless a
# statement allows it, the owner keeps everything).
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject")
LIST_ACTIONS = ("s3:ListBucket",)
# Characters a policy resource treats as wildcards: a model name holding them would widen
# the grant to other names.
_WILDCARDS = re.compile(r"[*?]")


class PolicyError(ValueError):
    """A cache group whose names no policy statement can name exactly (one line)."""


@dataclass(frozen=True)
class GroupUser:
    """One cache group's engine user and the object-name prefix it may use."""

    group: str  # kvceph_cache_group, e.g. "gpu"
    uid: str  # RGW user id, e.g. "lmcache-gpu"
    prefix: str  # e.g. "Qwen_Qwen3-32B@2@"


def object_prefix(serve_model: str, world_size: int) -> str:
    """The prefix of every object a cache group writes (LMCache 0.5.6 naming, / -> _)."""
    prefix = f"{serve_model.replace('/', '_')}@{int(world_size)}@"
    if _WILDCARDS.search(prefix):
        raise PolicyError(
            f"model argument {serve_model!r} holds * or ?, which a bucket policy reads as "
            "wildcards (the group's grant would reach other groups' names); fix: serve it "
            "from a path without them"
        )
    return prefix


def group_uid(base_user: str, group: str) -> str:
    """The RGW user of one cache group: ``<kvceph_s3_user>-<group>``."""
    return f"{base_user}-{group}"


def _principal(uid: str) -> dict:
    return {"AWS": [f"arn:aws:iam:::user/{uid}"]}


def statements(bucket: str, users: list[GroupUser], legacy_uid: str | None = None) -> list[dict]:
    """kvceph's statements: per group, get/put on its prefix and list under it; the legacy
    single engine user (while its key is still configured) get/put/list on the whole bucket,
    which is what it had as the owner's key minus delete and bucket operations."""
    out: list[dict] = []
    for u in sorted(users, key=lambda u: u.group):
        out.append(
            {
                "Sid": f"{SID_PREFIX}{u.group}-objects",
                "Effect": "Allow",
                "Principal": _principal(u.uid),
                "Action": list(OBJECT_ACTIONS),
                "Resource": [f"arn:aws:s3:::{bucket}/{u.prefix}*"],
            }
        )
        out.append(
            {
                "Sid": f"{SID_PREFIX}{u.group}-list",
                "Effect": "Allow",
                "Principal": _principal(u.uid),
                "Action": list(LIST_ACTIONS),
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLikeIfExists": {"s3:prefix": [f"{u.prefix}*"]}},
            }
        )
    if legacy_uid:
        out.append(
            {
                "Sid": f"{SID_PREFIX}legacy-engines",
                "Effect": "Allow",
                "Principal": _principal(legacy_uid),
                "Action": [*OBJECT_ACTIONS, *LIST_ACTIONS],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        )
    return out


@dataclass
class PolicyMerge:
    """The bucket's policy with kvceph's statements in place of its old ones."""

    document: dict
    added: list[str]
    updated: list[str]
    removed: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def summary(self) -> str:
        parts = [
            f"{verb} {', '.join(sids)}"
            for verb, sids in (
                ("add", self.added),
                ("update", self.updated),
                ("remove", self.removed),
            )
            if sids
        ]
        return "; ".join(parts) or "no change"


def _normal(statement: dict) -> str:
    """A statement as RGW may return it (single values unlisted, keys reordered) compared as
    kvceph writes it."""

    def norm(value):
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            items = [norm(v) for v in value]
            return sorted(items, key=json.dumps) if len(items) != 1 else items[0]
        return value

    return json.dumps(norm(statement), sort_keys=True)


def merge(current: dict | None, wanted: list[dict]) -> PolicyMerge:
    """Replace kvceph's statements (Sid ``kvceph-*``) in ``current``, keep everyone else's.

    + current: the bucket's policy document as GetBucketPolicy returns it, None for none
    + wanted: ``statements(...)``
    """
    old = [s for s in (current or {}).get("Statement", []) if isinstance(s, dict)]
    ours = {s.get("Sid"): s for s in old if str(s.get("Sid", "")).startswith(SID_PREFIX)}
    others = [s for s in old if not str(s.get("Sid", "")).startswith(SID_PREFIX)]
    want = {s["Sid"]: s for s in wanted}
    added = sorted(set(want) - set(ours))
    removed = sorted(set(ours) - set(want))
    updated = sorted(
        sid for sid in set(want) & set(ours) if _normal(want[sid]) != _normal(ours[sid])
    )
    document = {"Version": (current or {}).get("Version", VERSION), "Statement": others + wanted}
    return PolicyMerge(document, added, updated, removed)


def dump(document: dict) -> str:
    """The policy as kvceph sends it (compact, sorted keys: the same text every run)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))
