"""status.py's bucket figures as a Prometheus text file (node_exporter's textfile collector).

No exporter reports an RGW bucket's usage against its quota (the mgr's module has pools);
status.py reads both (``radosgw-admin bucket stats``, the bucket's or its owner's quota). With
``--data kvceph_status_metrics=<dir>/kvceph.prom`` it writes them, on a timer, where the
controller's node_exporter reads text files; the quota alerts (``rules.py``) read them.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path

NAMESPACE = "kvceph"  # the metrics' prefix (prometheus_client's namespace)
USED = f"{NAMESPACE}_bucket_used_bytes"
QUOTA = f"{NAMESPACE}_bucket_quota_bytes"
OBJECTS = f"{NAMESPACE}_bucket_objects"
READ_AT = f"{NAMESPACE}_status_read_timestamp_seconds"
CRC32C_REFUSED = f"{NAMESPACE}_connector_crc32c_refused"
GROUP_USED = f"{NAMESPACE}_cache_group_used_bytes"
GROUP_SHARE = f"{NAMESPACE}_cache_group_share_bytes"
GROUP_RATE = f"{NAMESPACE}_cache_group_fill_rate_bytes_per_second"
TRIM_AT = f"{NAMESPACE}_cache_trim_timestamp_seconds"
_HELP = {
    USED: "Bytes in the bucket (radosgw-admin bucket stats), as status.py read them.",
    QUOTA: "The bucket's quota in bytes (its own, else its owner's per-bucket quota).",
    OBJECTS: "Objects in the bucket.",
    READ_AT: "When status.py read the bucket (Unix time).",
    CRC32C_REFUSED: "GET bodies kvceph's connector refused on their crc32c (each a miss) since "
    "the engine started, as it last logged (at most once a minute).",
    GROUP_USED: "Bytes a cache group's user wrote under its prefix, as the trim last listed.",
    GROUP_SHARE: "The cache group's share of the bucket owner's quota (the trim's bound).",
    GROUP_RATE: "Bytes/s the cache group wrote between its last two trims.",
    TRIM_AT: "When the trim timer last listed the cache group (Unix time).",
}


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(doc: dict) -> str:
    """The text file for status.py's document; only what it read (no zeros for unknowns)."""
    cluster = doc.get("cluster") or {}
    bucket = cluster.get("bucket")
    values = {
        USED: cluster.get("bytes"),
        QUOTA: cluster.get("quota_bytes"),
        OBJECTS: cluster.get("objects"),
    }
    out: list[str] = []
    for name, value in values.items():
        if bucket and value is not None:
            out += [
                f"# HELP {name} {_HELP[name]}",
                f"# TYPE {name} gauge",
                f'{name}{{bucket="{_esc(bucket)}"}} {float(value)!r}',
            ]
    if bucket and values[USED] is not None:
        stamp = datetime.fromisoformat(doc["time"]).timestamp()
        out += [f"# HELP {READ_AT} {_HELP[READ_AT]}", f"# TYPE {READ_AT} gauge"]
        out.append(f'{READ_AT}{{bucket="{_esc(bucket)}"}} {stamp!r}')
    out += _groups(bucket, cluster.get("groups") or ())
    out += _crc32c(doc)
    return "\n".join(out) + "\n" if out else ""


def _groups(bucket: str | None, groups) -> list[str]:
    """Each cache group's bytes, share, fill rate and trim time (deploys/cluster/cache_trim.py)."""
    fields = {GROUP_USED: "bytes", GROUP_SHARE: "share_bytes", GROUP_RATE: "fill_rate",
              TRIM_AT: "read_at"}  # fmt: skip
    out: list[str] = []
    for name, field in fields.items():
        rows = [g for g in groups if g.get(field) is not None]
        if not bucket or not rows:
            continue
        out += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} gauge"]
        for g in rows:
            labels = f'bucket="{_esc(bucket)}",prefix="{_esc(g["prefix"])}"'
            out.append(f"{name}{{{labels}}} {float(g[field])!r}")
    return out


def _crc32c(doc: dict) -> list[str]:
    """The refused-body count of every engine status.py read it for (0 while none)."""
    rows = [r for r in doc.get("engines") or () if r.get("reachable") and r.get("crc32c_refused")]
    if not rows:
        return []
    out = [f"# HELP {CRC32C_REFUSED} {_HELP[CRC32C_REFUSED]}", f"# TYPE {CRC32C_REFUSED} gauge"]
    for r in rows:
        labels = f'host="{_esc(r["host"])}",unit="{_esc(r["unit"])}"'
        out.append(f"{CRC32C_REFUSED}{{{labels}}} {float(r['crc32c_refused']['refused'])!r}")
    return out


def write(doc: dict, path: str | Path) -> Path:
    """Atomically (the collector must never read half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".kvceph-", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(exposition(doc))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path
