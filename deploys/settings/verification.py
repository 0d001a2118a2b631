"""Verification (verify.py) and cache probe (probe.py) settings."""

from __future__ import annotations

from dataclasses import dataclass

from deploys.settings.reader import Reader
from deploys.settings.s3 import endpoint_parts

# --- Verification (verify.py) -------------------------------------------------------------------
# BEGIN verify settings (owned by verify.py / deploys/verification)


@dataclass(frozen=True)
class VerifySettings:
    scheme: str  # how the controller reaches the engines' OpenAI API
    s3_endpoint: str | None  # how the controller reaches RGW; None: kvceph_s3_endpoint
    document_tokens: int
    output_tokens: int
    warm_ratio: float  # warm TTFT must be < cold TTFT x this
    dram_ratio: float  # a same-node repeat (DRAM tier) must take <= cold TTFT x this
    fallback_tolerance: float  # fallback TTFT within cold x (1 +- this)
    request_timeout: int
    restart_timeout: int
    s3_timeout: int
    objects_timeout: int  # wait for the run's objects (found by name) to appear
    max_listed_objects: int
    cleanup: bool
    report_dir: str


def verify_settings(r: Reader) -> VerifySettings:
    s3 = r.opt_str("kvceph_verify_s3_endpoint")
    if s3 is not None:
        endpoint_parts(r, "kvceph_verify_s3_endpoint", s3)
    return VerifySettings(
        scheme=r.choice("kvceph_verify_scheme", "http", ("http", "https")),
        s3_endpoint=s3,
        document_tokens=r.int("kvceph_verify_document_tokens", 16384, lo=256, hi=1048576),
        output_tokens=r.int("kvceph_verify_output_tokens", 32, lo=1, hi=4096),
        warm_ratio=r.float("kvceph_verify_warm_ratio", 1.0, lo=0.0, hi=1.0),
        # The H200's same-node repeats from DRAM took x0.065-0.09 of cold at 16k tokens and
        # x0.043 at 32k (hw/h200/results/2026-12-03-v033); S3 warm x0.48-0.70.
        dram_ratio=r.float("kvceph_verify_dram_ratio", 0.15, lo=0.0, hi=1.0),
        fallback_tolerance=r.float("kvceph_verify_fallback_tolerance", 0.5, lo=0.0, hi=10.0),
        request_timeout=r.int("kvceph_verify_request_timeout", 600, lo=5, hi=7200),
        restart_timeout=r.int("kvceph_verify_restart_timeout", 180, lo=5, hi=3600),
        s3_timeout=r.int("kvceph_verify_s3_timeout", 30, lo=1, hi=600),
        objects_timeout=r.int("kvceph_verify_objects_timeout", 120, lo=1, hi=3600),
        max_listed_objects=r.int("kvceph_verify_max_listed_objects", 200000, lo=1000),
        cleanup=r.bool("kvceph_verify_cleanup", True),
        report_dir=r.str("kvceph_verify_report_dir", "reports"),
    )


# END verify settings


# --- Cache probe (probe.py) ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeSettings:
    tokens: int  # prompt tokens whose chunks each round moves (per worker: tokens // chunk_size)
    rounds: int
    timeout: int  # seconds for one host's whole probe


def probe_settings(r: Reader) -> ProbeSettings:
    return ProbeSettings(
        tokens=r.int("kvceph_probe_tokens", 16384, lo=256, hi=1048576),
        rounds=r.int("kvceph_probe_rounds", 3, lo=1, hi=20),
        timeout=r.int("kvceph_probe_timeout", 600, lo=10, hi=7200),
    )
