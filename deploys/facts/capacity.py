"""Facts the S3 quota is decided from and status reads: free space, the user's stats."""

from __future__ import annotations

import json

from pyinfra.api import FactBase

from deploys.facts.ceph import _CephFact
from deploys.facts.rgw import _RadosgwStatus, radosgw_json


class CephDf(_CephFact):
    """
    Each pool's MAX AVAIL and the cluster's raw free bytes (``ceph df``).

    MAX AVAIL is what a pool can still store (after replication) before its fullest OSD
    reaches the full ratio: the figure a derived S3 quota is a fraction of
    (deploys/cluster/capacity.py).

    .. code:: python

        {"default.rgw.buckets.data": {"max_avail": 64424509440, "stored": 4096},
         "_raw_avail": 128849018880}
    """

    ceph_args = ("df",)

    def process(self, output):
        data = json.loads("\n".join(output))
        out: dict = {"_raw_avail": int((data.get("stats") or {}).get("total_avail_bytes", 0))}
        for pool in data.get("pools") or []:
            stats = pool.get("stats") or {}
            out[pool["name"]] = {
                "max_avail": int(stats.get("max_avail", 0)),
                "stored": int(stats.get("stored", stats.get("bytes_used", 0))),
            }
        return out


class RgwUserStats(_RadosgwStatus):
    """
    An RGW user's stats as its quota counts them (``radosgw-admin user stats``), None when the
    user does not exist. ``last_stats_update`` is when they last changed: once the quota is
    full nothing new is stored, so it says since when (within RGW's user-stats flush, 180 s).

    .. code:: python

        {"size": 1048576, "objects": 32, "last_stats_update": "2026-12-03T18:20:01.123Z"}
    """

    def command(self, uid: str, timeout: int = 60):
        return radosgw_json(timeout, "stats", "user", "stats", f"--uid={uid}")

    def summary(self, data: dict):
        stats = data.get("stats") or {}
        return {
            "size": int(stats.get("size", 0)),
            "objects": int(stats.get("num_objects", 0)),
            "last_stats_update": data.get("last_stats_update"),
        }


class CacheTrimState(FactBase):
    """
    The trim timer's last reading of each cache group (``/var/lib/kvceph/cache-trim.json``,
    written by ``s3admin.py trim``), keyed by the group's prefix; {} when it never ran.

    .. code:: python

        {"kv/Qwen_Qwen3-32B@2@1@": {"used": 1073741824, "share": 2147483648,
                                    "rate": 1048576.0, "time": 1796000000.0, ...}}
    """

    def command(self, path: str):
        return f"cat {path} 2>/dev/null || true"

    def process(self, output):
        try:
            data = json.loads("\n".join(output) or "{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}
