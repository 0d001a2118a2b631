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
_HELP = {
    USED: "Bytes in the bucket (radosgw-admin bucket stats), as status.py read them.",
    QUOTA: "The bucket's quota in bytes (its own, else its owner's per-bucket quota).",
    OBJECTS: "Objects in the bucket.",
    READ_AT: "When status.py read the bucket (Unix time).",
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
    return "\n".join(out) + "\n" if out else ""


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
