"""What verify.py does differently in LMCache MP mode (docs/design.md "MP mode"; issue 51).

- **Which connector ran.** vLLM silently falls back to its built-in copy of LMCacheMPConnector
  when LMCache's class fails to import (that copy ignores ``save_decode_cache``, LMCache #5230);
  only its start line tells: :data:`EXTERNAL_LINE` must be in the engine's journal
  (:func:`connector_verdict`).
- **The S3 step.** One server per host holds L1 for every engine, and an engine restart does not
  empty it: the warm-from-S3 step clears it first, ``POST /cache/clear`` on the server's
  loopback HTTP port, run on the host over verify's SSH channel (:func:`clear_l1_command`;
  the port has no authentication, so it never leaves the host).
- **Per-tier hits** come from the server's ``/metrics`` (also fetched on the host,
  :func:`metrics_command`): ``lmcache_mp_lookup_hit_l1_tokens_total`` /
  ``..._l2_tokens_total``, tokens (:func:`tier_hits`, :func:`tier_delta`; the names loan 12's
  H100 server exported).
"""

from __future__ import annotations

import shlex

from deploys import paths
from deploys.monitoring import mp_server
from deploys.verification.verdicts import FAIL, Verdict

EXTERNAL_LINE = (
    "Using external LMCacheMPConnector from lmcache.integration.vllm.lmcache_mp_connector"
)
CLEAR_URL = f"http://{paths.MP_HOST}:{paths.MP_HTTP_PORT}/cache/clear"
METRICS_URL = paths.MP_METRICS_URL
HIT_METRICS = {
    "l1": "lmcache_mp_lookup_hit_l1_tokens_total",
    "l2": "lmcache_mp_lookup_hit_l2_tokens_total",
}
# Standard library only: runs with the host's python3, as root over verify's channel; prints
# the answer's body, exits 1 on anything but 200.
_POST = (
    "import sys,urllib.request as u;"
    'r=u.urlopen(u.Request(sys.argv[1],data=b\'{"tier":"l1","force":false}\','
    "headers={'content-type':'application/json'},method='POST'),timeout=30);"
    "print(r.read().decode());sys.exit(r.status!=200)"
)
_GET = (
    "import sys,urllib.request as u;"
    "r=u.urlopen(sys.argv[1],timeout=30);sys.stdout.write(r.read().decode());sys.exit(r.status!=200)"
)


def clear_l1_command() -> str:
    """The host command that clears its MP server's L1 (LMCache's ``{"tier": "l1"}``)."""
    return " ".join(shlex.quote(w) for w in ("python3", "-c", _POST, CLEAR_URL))


def metrics_command() -> str:
    """The host command that prints its MP server's ``/metrics``."""
    return " ".join(shlex.quote(w) for w in ("python3", "-c", _GET, METRICS_URL))


def cleared(output: str) -> bool:
    """Whether a clear command's output is LMCache's success answer."""
    return '"status":"ok"' in output.replace(" ", "")


def tier_hits(text: str) -> dict[str, float] | None:
    """Lookup hit tokens by tier from the server's Prometheus text; None when absent.

    + text: ``GET /metrics`` of the MP server (lines joined by newlines or by '; ').
    """
    # status.py's reading of the same text: each metric summed over its labelled series
    sums = mp_server.metric_sums(text.replace("; ", "\n"))
    if any(name not in sums for name in HIT_METRICS.values()):
        return None
    return {tier: sums[name] for tier, name in HIT_METRICS.items()}


def tier_delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict | None:
    """Hit tokens per tier between two scrapes (None when either is missing)."""
    if before is None or after is None:
        return None
    return {tier: after[tier] - before[tier] for tier in HIT_METRICS}


def connector_verdict(host: str, external_logged: bool | None) -> Verdict | None:
    """FAIL when the engine's journal lacks :data:`EXTERNAL_LINE` (vLLM's built-in copy ran),
    None when it has it or the journal could not be read (said elsewhere).

    + host: the target's name. + external_logged: journal_has(..., EXTERNAL_LINE).
    """
    if external_logged is not False:
        return None
    return Verdict(
        FAIL,
        f"{host}: the engine's journal has no '{EXTERNAL_LINE}' since it started: vLLM ran its "
        "built-in copy of LMCacheMPConnector (LMCache's class failed to import); fix: check "
        "that lmcache 0.5.6 imports in the engine's venv, then restart the engine",
    )


def s3_step_verdict(host: str, delta: dict | None, expected: int) -> Verdict | None:
    """FAIL when the warm-from-S3 step was served by L1 (the clear did not take) or L2 served
    fewer tokens than expected; None otherwise (or without the server's figures).

    + delta: tier_delta over the step. + expected: the hit tokens the cold step's chunks give.
    """
    if delta is None:
        return None
    if delta["l1"] > 0:
        return Verdict(
            FAIL,
            f"{host}: the S3 step hit {delta['l1']:g} tokens in the MP server's L1 after "
            "POST /cache/clear: it measured DRAM, not S3; fix: check lmcache-server.service's "
            "journal for the clear",
        )
    if delta["l2"] < expected:
        return Verdict(
            FAIL,
            f"{host}: the MP server's L2 served {delta['l2']:g} of {expected} tokens in the S3 "
            "step; fix: check the kvceph MP L2 lines in lmcache-server.service's journal",
        )
    return None
