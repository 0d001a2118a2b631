"""PURE: each cache group's share of the quota, the trim timer that keeps it below the share,
and how soon a group fills it (docs/capacity.md "When the quota is full").

RGW charges every object of a bucket to the bucket's owner, whoever wrote it: a quota on a
group's own user bounds nothing in the shared bucket, and the owner's one quota is shared by
every group. So kvceph gives each group an equal share of the owner's quota and trims it
itself: every ``INTERVAL_MIN`` minutes ``s3admin.py trim`` lists the group's prefix and deletes
its oldest objects (those its own user wrote, nothing else) from 90 % of the share down to
80 %. A full cache then keeps storing the newest prefixes, and one busy group cannot take the
others' room.
"""

from __future__ import annotations

import shlex

from deploys import paths

UNIT = "kvceph-cache-trim"
SERVICE_PATH = f"/etc/systemd/system/{UNIT}.service"
TIMER_PATH = f"/etc/systemd/system/{UNIT}.timer"
STATE_PATH = f"{paths.STATE_DIR}/cache-trim.json"
# Minutes between trims: each frees a tenth of a share, so a group may write up to that much
# in one interval before RGW's quota refuses it (the plan says when the fleet writes faster).
INTERVAL_MIN = 5
HIGH_WATER = 0.9  # s3admin.py's HIGH_WATER / LOW_WATER (a test keeps them equal)
LOW_WATER = 0.8
# One trim lists a share of ~1 TiB of 1-8 MiB chunks (~10^5-10^6 objects, 1000 a page).
TRIM_TIMEOUT_S = 1800


def share(quota: int, groups: int) -> int:
    """Each group's bytes: an equal part of the owner's quota (in bytes, not rounded: a lab's
    1 MiB quota over two groups must not round to a share of 0, which trims nothing)."""
    return quota // max(1, groups)


def service_text(
    bucket: str, users, quota: int, owner: str, python: str = "/usr/bin/python3"
) -> str:
    """The oneshot unit that trims every group in turn (one ExecStart per group; a group that
    fails does not keep the next from being trimmed: ``-`` prefix).

    + bucket: the shared bucket
    + users: ``bucket_policy.GroupUser`` of every cache group
    + quota: the bucket owner's quota in bytes
    + owner: the bucket owner's uid (its quota stats are synced after a delete)
    """
    each = share(quota, len(users))
    lines = [
        "# kvceph: trims each cache group's oldest objects near its share (docs/capacity.md)",
        "[Unit]",
        "Description=kvceph cache trim: each group's oldest objects near its quota share",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=oneshot",
        f"TimeoutStartSec={TRIM_TIMEOUT_S}",
    ]
    for u in sorted(users, key=lambda u: u.group):  # one text whatever the order
        argv = [python, paths.ADMIN_SCRIPT, "--config", paths.ADMIN_CONFIG, "trim", bucket]
        argv += ["--prefix", u.prefix, "--owner", u.uid, "--share-bytes", str(each)]
        argv += ["--state", STATE_PATH, "--sync-uid", owner]
        # systemd expands % specifiers in ExecStart: a literal % is %%.
        lines.append("ExecStart=-" + shlex.join(argv).replace("%", "%%"))
    return "\n".join(lines) + "\n"


def timer_text() -> str:
    """The timer that starts the trim every ``INTERVAL_MIN`` minutes."""
    return (
        "# kvceph: starts kvceph-cache-trim.service (docs/capacity.md)\n"
        "[Unit]\n"
        "Description=kvceph cache trim every few minutes\n\n"
        "[Timer]\n"
        "OnBootSec=5min\n"
        f"OnUnitInactiveSec={INTERVAL_MIN}min\n"
        "AccuracySec=30s\n\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )


def days_to_full(used: int, share_bytes: int, rate: float | None) -> float | None:
    """Days until a group at ``rate`` bytes/s passes its share, None when it does not grow (or
    no rate was measured yet). The trim keeps it below; this says how soon it would be full
    without it, and the alert fires on it (deploys/monitoring/rules.py)."""
    if not rate or rate <= 0:
        return None
    return max(0.0, (share_bytes - used) / rate / 86400)


def interval_line(share_bytes: int, rate: float) -> str | None:
    """A warning when the fleet writes more than a tenth of a share in one interval: RGW's
    quota then refuses writes before the next trim frees room (None: it keeps up)."""
    room = share_bytes * (HIGH_WATER - LOW_WATER)
    if rate * INTERVAL_MIN * 60 <= room or share_bytes <= 0:
        return None
    return (
        f"kvceph: WARNING: the fleet may write {rate * INTERVAL_MIN * 60 / 2**30:.1f} GiB in "
        f"the trim's {INTERVAL_MIN} min, more than the {room / 2**30:.1f} GiB one trim frees "
        "per group: full groups refuse writes between trims; fix: raise "
        "kvceph_s3_quota_max_size_gb"
    )
