"""Verification (verify.py) and cache probe (probe.py) settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deploys.settings.reader import Reader, SettingsError
from deploys.settings.s3 import endpoint_parts

CANARY_KEY = "kvceph_verify_canary_hosts"

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
    router_only: bool  # only the router step (routed.py): the route's pool and a repeat
    report_dir: str
    # One inference host per cache group whose engine verify restarts (warm, fallback); the
    # others are only asked. Empty: the first healthy engine of each group is restarted.
    canary_hosts: tuple[str, ...] = ()


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
        restart_timeout=r.int("kvceph_verify_restart_timeout", 360, lo=5, hi=3600),
        s3_timeout=r.int("kvceph_verify_s3_timeout", 30, lo=1, hi=600),
        objects_timeout=r.int("kvceph_verify_objects_timeout", 120, lo=1, hi=3600),
        max_listed_objects=r.int("kvceph_verify_max_listed_objects", 200000, lo=1000),
        cleanup=r.bool("kvceph_verify_cleanup", True),
        router_only=r.bool("kvceph_verify_router_only", False),
        report_dir=r.str("kvceph_verify_report_dir", "reports"),
        canary_hosts=_canary_hosts(r),
    )


def _canary_hosts(r: Reader) -> tuple[str, ...]:
    names = r.list(CANARY_KEY, [])
    for name in names:
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise r.fail(
                CANARY_KEY, names, "must list inventory host names", "use ['gpu1', 'gaudi1']"
            )
    if len(set(names)) != len(names):
        raise r.fail(CANARY_KEY, names, "names a host twice", "list each canary once")
    return tuple(names)


def check_canary_hosts(hosts: Mapping, groups: Sequence) -> None:
    """``kvceph_verify_canary_hosts``, when set, names exactly one inference host of every
    cache group (verify restarts that engine only); one-line SettingsError otherwise.

    + hosts: host name -> HostSettings; the first inference host's verify settings are the
      run's (verify.py reads them there), every inference host must say the same
    + groups: the cache groups (settings.inventory.CacheGroup: ``hosts``, ``model``, TP)
    """
    inference = [(n, me) for n, me in hosts.items() if me.is_inference]
    if not inference:
        return
    first, canaries = inference[0][0], inference[0][1].verify.canary_hosts
    for name, me in inference:
        if me.verify.canary_hosts != canaries:
            raise SettingsError(
                f"{name}: {CANARY_KEY} = {list(me.verify.canary_hosts)} differs from {first}'s "
                f"{list(canaries)}; fix: set it once, in group_data/all.py"
            )
    if not canaries:
        return
    member = {h: g for g in groups for h in g.hosts}
    for canary in canaries:
        if canary not in member:
            raise SettingsError(
                f"{first}: {CANARY_KEY} = {list(canaries)}: {canary!r} is not an inference host "
                "of this inventory; fix: name one inference host of each cache group"
            )
    for g in groups:
        chosen = [c for c in canaries if member[c] is g]
        if len(chosen) != 1:
            what = "names none" if not chosen else f"names {len(chosen)} ({', '.join(chosen)})"
            raise SettingsError(
                f"{first}: {CANARY_KEY} = {list(canaries)} {what} of cache group {g.model} "
                f"TP={g.tensor_parallel_size} ({', '.join(g.hosts)}); fix: name exactly one "
                "host of each cache group (verify restarts its engine only), or leave it empty"
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
