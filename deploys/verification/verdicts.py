"""Pass/fail/warn/skip for each verification step, with the likely cause of a failure.

Pure functions of measured figures. Causes quote the seed's troubleshooting list
(BRIEF.md section 4) so an operator reads what to check, not only that something failed.
"""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"

# The seed author's troubleshooting list, one line each.
CAUSE_UNREACHABLE = (
    "LMCache cannot reach RGW (Connection refused / EndpointConnectionError): check the "
    "endpoint's scheme, host and port, curl it, check that the credentials profile name and "
    "AWS_PROFILE match"
)
CAUSE_CHUNK_MISMATCH = (
    "chunks written but never read back: chunk-size mismatch (vLLM block 16, LMCache chunk "
    "256; misaligned settings give different hashes)"
)
CAUSE_CONNECTOR = (
    "vLLM does not recognise the KV connector (LMCacheConnector vs LMCacheConnectorV1): vLLM "
    "and LMCache versions must match; see journalctl -u vllm"
)
CAUSE_LOW_HIT = (
    "low hit rate: keys are hashes of token prefixes and one different token invalidates every "
    "later chunk; nodes must share model string, TP, kv dtype, chunk size, hash algorithm, "
    "PYTHONHASHSEED and tokenizer"
)
CAUSE_401 = (
    "API returns 401: the engines require an API key and this run has none or another one "
    "(KVCEPH_VLLM_API_KEY, docs/security.md), stray whitespace in the key, or a wrong base URL"
)
CAUSE_S3_DISABLED = (
    "the engine logged 'S3 connection disabled' (3 connection errors: LMCache stops using S3 "
    "until restart)"
)


# LMCache 0.5.6's own log lines for the two failures an undersized lmcache.yaml caused on a real
# H200 (docs/procedure.md, "Pinned memory and timeouts"), and what each means.
LOG_LOOKUP_TIMEOUT = "is still waiting for async lookup"
# kvceph's connector (kvceph_connector.s3core.REFUSED_LINE, logged at once on an engine's first
# refusal, then at most once a minute) on GET bodies its crc32c check refused.
LOG_CHECKSUM = "kvceph: crc32c since start: refused"
LOG_NO_MEMORY = "Failed to allocate memory block"
LMCACHE_LOG_CAUSES = (
    (
        "Failed to load remote connector",
        "the engine logged 'Failed to load remote connector': LMCache could not import the "
        "remote storage plugin (kvceph_connector) and serves with no remote tier; rerun "
        "deploy.py's engine-software stage, see journalctl -u vllm",
    ),
    (
        "Failed to initialize/re-establish remote connection",
        "the engine logged 'Failed to initialize/re-establish remote connection': LMCache has "
        "no connection to S3 (its connector could not be created); see journalctl -u vllm",
    ),
    (
        LOG_NO_MEMORY,
        "the engine logged 'Failed to allocate memory block': LMCache's pinned CPU buffer "
        "(max_local_cpu_size per worker) is smaller than this request's KV; remove "
        "kvceph_lmcache_max_local_cpu_size (it is derived from the model) or raise it",
    ),
    (
        LOG_LOOKUP_TIMEOUT,
        "the engine logged 'is still waiting for async lookup': LMCache's lookup_timeout_ms ran "
        "out before the chunks arrived, so it reported 0 hits and vLLM recomputed; remove "
        "kvceph_lmcache_lookup_timeout_ms (derived) or lower kvceph_kv_load_gb_per_s",
    ),
)


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str

    def __post_init__(self):
        # One line per check in the report, whatever a remote command printed.
        object.__setattr__(self, "message", " ".join(str(self.message).split()))

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def _s3_note(s3_disabled: bool | None) -> str:
    return f"; {CAUSE_S3_DISABLED}" if s3_disabled else ""


def cold(
    prompt_tokens: int | None, created: int, expected: int, s3_disabled: bool | None = None
) -> Verdict:
    """The cold request wrote the document's chunks (one object per chunk and TP worker)."""
    if prompt_tokens is None:
        return Verdict(FAIL, "the response carried no usage.prompt_tokens; cannot count chunks")
    if expected == 0:
        return Verdict(
            FAIL, f"document of {prompt_tokens} tokens is shorter than one chunk; raise "
            "kvceph_verify_document_tokens",
        )  # fmt: skip
    if created == 0:
        return Verdict(FAIL, f"no objects written (none of the {expected} names found): "
                       f"{CAUSE_UNREACHABLE}; or the engine keys chunks unlike the settings "
                       "(hash algorithm, PYTHONHASHSEED, model string, TP: redeploy)"
                       + _s3_note(s3_disabled))  # fmt: skip
    if created < expected:
        return Verdict(
            FAIL,
            f"{created} of {expected} objects found by name: the engine's chunk size, "
            "save_unfull_chunk, hash algorithm, PYTHONHASHSEED, model string or TP differ from "
            "the settings (redeploy), or S3 write errors" + _s3_note(s3_disabled),
        )
    return Verdict(PASS, f"{created} objects written, as expected")


def cold_not_stored(prompt_tokens: int | None, created: int, min_hit: int) -> Verdict:
    """kvceph.skip_short_puts and a document below the crossover: no object may be written."""
    if prompt_tokens is None:
        return Verdict(FAIL, "the response carried no usage.prompt_tokens; cannot count chunks")
    if created:
        return Verdict(
            FAIL, f"{created} objects written for a document of {prompt_tokens} tokens, below "
            f"the crossover {min_hit} with kvceph_skip_short_puts on: the engine's connector "
            "does not skip them (an older kvceph-connector in its venv: redeploy)",
        )  # fmt: skip
    return Verdict(
        PASS, f"no object written: {prompt_tokens} tokens are below the crossover {min_hit} "
        "(kvceph_skip_short_puts)",
    )  # fmt: skip


def _causes(causes: tuple[str, ...]) -> str:
    return "".join(f"; {c}" for c in causes)


def _refused(hit: float | None, expected_hit: int, metric: str | None) -> Verdict:
    """A hit short because kvceph's connector refused bodies failing their crc32c: each a miss,
    recomputed (the answer check says whether the rest was right), so no failure of the chain;
    a WARN, as the bucket holds objects whose bytes are not those written."""
    return Verdict(
        WARN,
        f"{hit or 0:.0f} of {expected_hit} tokens loaded ({metric}): the engine's connector "
        "refused GET bodies whose crc32c differs from the one their PUT stored "
        f"(kvceph_connector_verify_crc32c; '{LOG_CHECKSUM}' in its journal), a miss each, "
        "recomputed: objects in the bucket were altered after they were written (disk, proxy, "
        "a hand edit)",
    )


def _hit(
    hit: float | None, expected_hit: int, metric: str | None, causes: tuple[str, ...] = ()
) -> Verdict | None:
    """The common cache-hit judgement; None when the hit is complete."""
    if hit is None:
        return Verdict(
            FAIL,
            "the engine exposes neither vllm:prompt_tokens_by_source_total nor "
            "vllm:external_prefix_cache_hits_total on /metrics; cannot judge a cache hit",
        )
    if hit <= 0:
        return None  # the caller words the miss for its step
    if hit < expected_hit:
        if causes:  # the engine said why: name that, not the generic list
            return Verdict(
                FAIL, f"partial hit: {hit:.0f} of {expected_hit} tokens from {metric}"
                + _causes(causes),
            )  # fmt: skip
        return Verdict(
            FAIL, f"partial hit: {hit:.0f} of {expected_hit} tokens from {metric}: {CAUSE_LOW_HIT}"
        )
    return None


def below_crossover(*, hit: float | None, tokens: int, min_hit: int, source: str) -> Verdict:
    """A document whose hit is shorter than the crossover: kvceph's connector must report 0.

    + hit: tokens loaded from the cache (metrics delta)
    + tokens: the document's loadable tokens (whole chunks)
    + min_hit: kvceph.min_hit_tokens the engine runs with
    + source: where that figure came from
    """
    if hit is None:
        return _hit(hit, tokens, None)
    if hit > 0:
        return Verdict(
            FAIL,
            f"{hit:.0f} tokens loaded although the document's {tokens} are below the crossover "
            f"{min_hit} ({source}): kvceph's connector must report 0 hits below "
            "kvceph.min_hit_tokens; check the connector version in the engine venv",
        )
    return Verdict(
        PASS,
        f"no tokens loaded: the document's {tokens} are below the crossover {min_hit} ({source}); "
        "the engine recomputed without reading S3, as configured (a document above it, "
        "kvceph_verify_document_tokens, measures the load)",
    )


def warm(
    *,
    hit: float | None,
    expected_hit: int,
    metric: str | None,
    warm_ttft: float | None,
    cold_ttft: float | None,
    ratio: float,
    kv_bytes: int,
    objects: int,
    s3_disabled: bool | None = None,
    causes: tuple[str, ...] = (),
    refused: bool | None = None,
) -> Verdict:
    """After a restart the document's KV comes from the bucket; TTFT judged against cold.

    ``causes``: what the engine's own log says went wrong (LMCACHE_LOG_CAUSES), if anything;
    ``refused``: kvceph's connector refused bodies on their crc32c (LOG_CHECKSUM).
    """
    if refused and hit is not None and hit < expected_hit:
        return _refused(hit, expected_hit, metric)
    partial = _hit(hit, expected_hit, metric, causes)
    if partial:
        return partial
    if not hit:
        if causes:
            return Verdict(FAIL, f"no tokens loaded from the cache ({metric} +0)" + _causes(causes))
        cause = CAUSE_CHUNK_MISMATCH if objects else CAUSE_UNREACHABLE
        return Verdict(FAIL, f"no tokens loaded from the cache ({metric} +0): {cause}"
                       + _s3_note(s3_disabled))  # fmt: skip
    if not warm_ttft or not cold_ttft:
        return Verdict(FAIL, "no TTFT measured (no token streamed)")
    r = warm_ttft / cold_ttft
    load_bw = kv_bytes / warm_ttft
    break_even = kv_bytes / cold_ttft
    figures = (
        f"{hit:.0f} tokens loaded; TTFT {warm_ttft:.3f}s vs cold {cold_ttft:.3f}s (x{r:.2f}); "
        f"load {_bw(load_bw)} vs break-even {_bw(break_even)}"
    )
    if r < ratio:
        return Verdict(PASS, figures)
    # The chain works (hits are complete) but loading is not faster than recomputing: say so
    # plainly rather than fail a healthy chain or pass a useless one.
    return Verdict(
        WARN,
        f"{figures}: the cache chain works but the storage path is slower than recompute "
        f"(needs more than {_bw(break_even)} from RGW to pay off; check RGW/network "
        "bandwidth, s3_num_io_threads, or a longer document)",
    )


def cross_node(
    *,
    hit: float | None,
    expected_hit: int,
    metric: str | None,
    writer: str,
    ttft: float | None,
    cold_ttft: float | None,
    s3_disabled: bool | None = None,
    causes: tuple[str, ...] = (),
    refused: bool | None = None,
) -> Verdict:
    """Another host of the same cache group reads what the writer stored (``refused``: as
    :func:`warm`'s)."""
    if refused and hit is not None and hit < expected_hit:
        return _refused(hit, expected_hit, metric)
    partial = _hit(hit, expected_hit, metric, causes)
    if partial:
        return partial
    if not hit and causes:
        return Verdict(
            FAIL, f"no cross-node hit on the chunks {writer} wrote ({metric} +0)" + _causes(causes)
        )
    if not hit:
        return Verdict(
            FAIL, f"no cross-node hit on the chunks {writer} wrote ({metric} +0): "
            f"{CAUSE_LOW_HIT}" + _s3_note(s3_disabled),
        )  # fmt: skip
    speed = f"; TTFT {ttft:.3f}s vs cold {cold_ttft:.3f}s" if ttft and cold_ttft else ""
    return Verdict(PASS, f"{hit:.0f} tokens loaded from {writer}'s chunks{speed}")


# Below this, a fallback TTFT that differs from cold is scheduling noise (a loaded 2-core
# controller moves sub-second TTFTs by tens of ms); the fault the check exists for, a wait on
# missing keys, costs seconds (lmcache blocking_timeout_secs, S3 timeouts).
FALLBACK_NOISE_S = 0.25


def fallback(
    *,
    refused: str | None,
    deleted: int,
    error: str | None,
    hit: float | None,
    ttft: float | None,
    cold_ttft: float | None,
    tolerance: float,
) -> Verdict:
    """With the run's objects deleted, a restarted engine recomputes and still answers."""
    if refused:
        return Verdict(FAIL, f"fallback not tested: {refused}")
    if error:
        return Verdict(
            FAIL, f"request failed after the objects were deleted: {error}: a missing chunk "
            "must fall back to prefill (kv_load_failure_policy recompute)",
        )  # fmt: skip
    if hit:
        return Verdict(
            FAIL, f"{hit:.0f} tokens still loaded after deleting {deleted} objects: another "
            "cache tier served them (local_cpu, or the objects were rewritten before the read)",
        )  # fmt: skip
    if not ttft or not cold_ttft:
        return Verdict(FAIL, "no TTFT measured (no token streamed)")
    r = ttft / cold_ttft
    if abs(r - 1.0) > tolerance and abs(ttft - cold_ttft) > FALLBACK_NOISE_S:
        return Verdict(
            FAIL, f"TTFT {ttft:.3f}s is x{r:.2f} of cold {cold_ttft:.3f}s, beyond "
            f"+-{tolerance:.0%}: the miss path does not behave like a cold prefill "
            "(S3 timeouts on missing keys? lmcache blocking_timeout_secs)",
        )  # fmt: skip
    return Verdict(
        PASS, f"{deleted} objects deleted; TTFT {ttft:.3f}s back near cold {cold_ttft:.3f}s "
        f"(x{r:.2f})",
    )  # fmt: skip


def _bw(bytes_per_s: float) -> str:
    return (
        f"{bytes_per_s / 1e9:.2f} GB/s" if bytes_per_s >= 1e8 else f"{bytes_per_s / 1e6:.1f} MB/s"
    )
