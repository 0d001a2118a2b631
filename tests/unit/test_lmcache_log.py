"""The key-rotation checker's reading of engine journals (tests/integration/lmcache_log.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from lmcache_log import PREFILTER, trouble  # noqa: E402

# Journal lines as the lab engine writes them (LMCache 0.5.6's templates, the engine's prefix).
PREFIX = "INFO 2026-11-30 14:02:11,403 [kvceph_lab_engine.s3] "
REFUSED = [
    "WARNING 2026-11-30 14:02:11,877 [kvceph_lab_engine.s3] "
    "Encountering error in S3 HEAD request with error code: 403",
    "ERROR 2026-11-30 14:02:12,001 [kvceph_lab_engine.s3] Failed to download "
    "vllm@1@0@5b968e92@bfloat16 from S3: AWS_ERROR_S3_INVALID_RESPONSE_STATUS: Invalid response",
    "ERROR 2026-11-30 14:02:12,002 [kvceph_lab_engine.s3] Failed to upload "
    "vllm@1@0@5b968e92@bfloat16 to S3: status 403",
    "ERROR 2026-11-30 14:02:12,003 [kvceph_lab_engine.s3] S3 connection error (1/3): "
    "AWS_IO_SOCKET_CONNECTION_REFUSED",
    "ERROR 2026-11-30 14:02:12,004 [kvceph_lab_engine.s3] S3 connection disabled after 3 "
    "consecutive failures. All future S3 operations will be skipped.",
    "ERROR 2026-11-30 14:02:12,005 [lmcache] <Error><Code>InvalidAccessKeyId</Code></Error>",
    "ERROR 2026-11-30 14:02:12,006 [lmcache] <Code>SignatureDoesNotMatch</Code>",
    # kvceph's connector (s3core._log_batch), the default.
    "WARNING 2026-12-04 16:02:12,007 [kvceph_connector.s3core] kvceph S3 put at "
    "lmcache.s3.kvlab:443: 2 of 8 failed (403), first vllm@2@0@5b968e92@bfloat16: refused "
    "with status 403",
    "WARNING 2026-12-04 16:02:12,008 [kvceph_connector.s3core] kvceph S3 lookup at "
    "lmcache.s3.kvlab:443: 8 of 8 misses (connection), first vllm@2@1@5b968e92@bfloat16: "
    "AWS_IO_SOCKET_CONNECTION_REFUSED; every S3 request is a miss for 0.5 s, then S3 is tried "
    "again",
]
NOISE = [
    # The line that failed CI: "a403e" inside a hexadecimal request ID.
    "INFO 2026-11-30 14:02:11,877 [kvceph_lab_engine.server] lmcache: "
    "request=cmpl-5b968e92747a403eb828234cd5c7b527 prompt_tokens=300 hit_tokens=0",
    # ",403" milliseconds of a timestamp; 403 as a size, a token count and an object key part.
    PREFIX + "Stored 403 tokens in 0.403 s",
    PREFIX + "lmcache: request=cmpl-1 prompt_tokens=4030 hit_tokens=403 bytes=403403",
    PREFIX + "S3 connector: Host=lmcache.s3.kvlab:80 bucket=lmcache region=default tls=off",
    PREFIX + "GET vllm@1@0@403abc@bfloat16 size=4030",
    # A HEAD status that is not a refusal (a 503 while RGW restarts) is not a key problem.
    PREFIX + "Encountering error in S3 HEAD request with error code: 503",
    PREFIX + "S3 connection recovered",
    "INFO 2026-12-04 16:02:11,001 [kvceph_connector.s3core] kvceph S3 core: "
    "Host=lmcache.s3.kvlab:443 bucket=lmcache https, 64 connections, timeout 5.0 s",
    "WARNING 2026-12-04 16:02:13,001 [kvceph_connector.s3core] kvceph S3 reachable again at "
    "lmcache.s3.kvlab:443 after 2.5 s",
]


@pytest.mark.parametrize("line", REFUSED)
def test_lmcache_trouble_lines_are_recognised(line):
    assert trouble(line)


@pytest.mark.parametrize("line", NOISE)
def test_403_inside_ids_timestamps_and_sizes_is_not_trouble(line):
    assert trouble(line) is None


def test_the_status_comes_from_its_own_field():
    assert trouble(REFUSED[-2]) == "S3 put refused with status 403"
    assert trouble(REFUSED[-1]) == "S3 lookup failed (connection)"
    assert trouble(PREFIX + "Encountering error in S3 HEAD request with error code: 403") == (
        "S3 HEAD refused with status 403"
    )
    assert trouble(PREFIX + "Encountering error in S3 HEAD request with error code: 4030") is None


@pytest.mark.parametrize("line", REFUSED)
def test_the_remote_prefilter_keeps_every_trouble_line(line):
    import re

    assert re.search(PREFILTER, line)
