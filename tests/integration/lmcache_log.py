"""Recognise S3 trouble in an engine's journal from LMCache 0.5.6's own message templates.

A line counts only where a field of one of LMCache's S3 connector messages says so (the lab
engine copies them, lab/engine/src/kvceph_lab_engine/s3.py), or of kvceph's connector's batch
line (the lab engine runs its real S3 core): the HEAD status taken from its own
"error code:" field, the download/upload failures, the connection circuit breaker, and S3's
error code names. A bare number anywhere in a line (a request ID, a timestamp, a size) never
counts: "403" inside ``cmpl-5b968e92747a403e…`` is noise, not a status.
"""

from __future__ import annotations

import re

# lmcache/v1/storage_backend/connector/s3_connector.py (0.5.6), one pattern per template.
_HEAD_STATUS = re.compile(r"Encountering error in S3 HEAD request with error code: (\d{3})\b")
_TEMPLATES = (
    ("download failed", re.compile(r"Failed to download \S+ from S3: ")),
    ("download failed", re.compile(r"Failed to download key at index \d+: ")),
    ("upload failed", re.compile(r"Failed to upload \S+ to S3: ")),
    ("connection error", re.compile(r"S3 connection error \(\d+/\d+\): ")),
    ("connection disabled", re.compile(r"S3 connection disabled after \d+ consecutive failures")),
)
# kvceph's connector (connector/src/kvceph_connector/s3core.py ``_log_batch``): one line per
# batch and kind of fault, "kvceph S3 put at <endpoint>: 2 of 8 failed (403), first <key>: ...";
# a lookup's 404 (a plain miss) goes to debug and never reaches the journal.
_KVCEPH_BATCH = re.compile(
    r"kvceph S3 (lookup|get|put|delete) at \S+: \d+ of \d+ (?:misses|failed) \(([^)]+)\)"
)
# S3's own error codes for a refused key (RGW answers with them in the XML body).
_ERROR_CODES = re.compile(r"\b(InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied)\b")
# A HEAD answered with these means the key is refused; 404 is a miss and is never logged.
REFUSED = frozenset({401, 403})

# A cheap filter for the remote side (`grep -E`): every line trouble() can accept contains one of
# these fixed parts of the templates, so nothing is lost; the verdict is always trouble()'s.
PREFILTER = (
    "S3 HEAD request with error code|Failed to (download|upload) |S3 connection (error|disabled)"
    "|InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|kvceph S3 "
)


def trouble(line: str) -> str | None:
    """What this journal line says went wrong with S3, or None when it says nothing of it."""
    head = _HEAD_STATUS.search(line)
    if head:
        status = int(head.group(1))
        return f"S3 HEAD refused with status {status}" if status in REFUSED else None
    batch = _KVCEPH_BATCH.search(line)
    if batch:
        what, kind = batch.groups()
        if kind.isdigit():
            return f"S3 {what} refused with status {kind}"
        return f"S3 {what} failed ({kind})"
    for what, template in _TEMPLATES:
        if template.search(line):
            return f"S3 {what}"
    code = _ERROR_CODES.search(line)
    return f"S3 error code {code.group(1)}" if code else None
