"""verify.py's router step: each route of every router host (docs/router.md), as a client sees it.

Per route, one line naming the router host and the served model:

1. **pool**: the route is ready (``/readiness`` 200) and lists exactly the inventory's engines
   of its model (``/workers``), each healthy. An engine verify.py just restarted is readmitted
   after one health check: its absence is waited out for :func:`readmit_seconds` first.
2. **repeat**: a short document unique to the run, sent to the route cold, then again. The
   engines' own counters (``vllm:prompt_tokens``, by source) say which engine served each
   request and where the repeat's prompt came from: PASS when the engine that served it cold
   served the repeat from a cache tier (its GPU prefix cache, or LMCache's DRAM / S3 tier);
   FAIL when the repeat went to another engine or was recomputed, or when its greedy answer
   differs from the cold one (answer.py; the first differing token named).

The document stays below one LMCache chunk (:func:`document_tokens`): it writes no object to
the bucket (nothing to clean up, no listing of a large bucket) and only vLLM's GPU prefix cache
can hold it, which is what the policy must find. The requests carry the engines' API key (the
router passes it through and checks it itself). A busy fleet can make the attribution
ambiguous (another client's request of the same size on another engine meanwhile): that is a
WARN naming the engines, never a FAIL.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploys.monitoring import metrics
from deploys.router import answers
from deploys.verification import answer, bookkeeping, document
from deploys.verification.report import StepResult
from deploys.verification.targets import Target
from deploys.verification.transport import CheckFailed
from deploys.verification.verdicts import FAIL, PASS, SKIP, WARN, Verdict

STEP = "router"
PROMPT_TOKENS = "vllm:prompt_tokens"
BY_SOURCE = "vllm:prompt_tokens_by_source"
# Where vLLM 0.26 says each prompt token came from (vllm/v1/metrics/loggers.py), and the older
# counters read when the by-source one is not exported.
GPU, EXTERNAL, COMPUTED = "local_cache_hit", "external_kv_transfer", "local_compute"
GPU_FALLBACK = "vllm:prefix_cache_hits"
EXTERNAL_FALLBACK = "vllm:external_prefix_cache_hits"
REMOTE_READ_BYTES = "lmcache:num_remote_read_bytes"
# cache_aware's load-balancing override (vllm-router 0.1.17 defaults, docs/router.md "Policy"):
# above this many requests on an engine, the least loaded one wins over the prefix.
BALANCE_ABS = 64
# The router's health check timeout (deploys/router/routes.HEALTH_TIMEOUT), in the wait for an
# engine verify.py just restarted.
CHECK_TIMEOUT = 2


@dataclass(frozen=True)
class Route:
    """One route of a router host, as the controller reaches it."""

    router: str  # the router host's inventory name
    url: str  # http://address:port of the route
    model: str
    policy: str  # kvceph_router_policy
    # (URL the router lists, the engine's target) for every engine of the inventory serving
    # the model
    workers: tuple[tuple[str, Target], ...]
    health_interval: int = 1  # kvceph_router_health_interval

    @property
    def port(self) -> str:
        return self.url.rsplit(":", 1)[-1]

    @property
    def name(self) -> str:
        return f"{self.router}:{self.port}"

    @property
    def unit(self) -> str:
        return f"kvceph-router@{self.port}.service"


def readmit_seconds(route: Route) -> float:
    """How long a healthy engine may be out of the route's pool: one health check (an interval
    and its timeout), twice (the check may start just before the engine answered)."""
    return 2.0 * (route.health_interval + CHECK_TIMEOUT)


def document_tokens(chunk_size: int) -> int:
    """Words of the routed document: half a chunk (a real tokenizer adds the nonce's pieces and
    the chat template, ~40 tokens), so LMCache stores nothing (save_unfull_chunk false); at least
    64, so that vLLM's prefix cache holds whole blocks of it (16 tokens; 128 on Gaudi)."""
    return max(64, chunk_size // 2)


# --- The pool --------------------------------------------------------------------------------


def pool_problems(route: Route, workers: list[dict]) -> list[str]:
    """What is wrong with the route's view of its workers, one phrase each (none: all well)."""
    expected = {url: t.name for url, t in route.workers}
    listed = {w["url"]: w for w in workers}
    out = [
        f"{name} ({url}) not among its workers (redeploy: the router's config is stale)"
        for url, name in expected.items()
        if url not in listed
    ]
    out += [
        f"{url} is a worker but no engine of the inventory (redeploy: stale config)"
        for url in listed
        if url not in expected
    ]
    out += [
        f"{expected[url]} ({url}) out of the pool: the router's /health checks of it fail "
        f"(the engine is down, or {route.router} is not in its kvceph_vllm_open_networks)"
        for url, w in listed.items()
        if url in expected and not w["healthy"]
    ]
    return out


# --- Which engine served a request, and from where --------------------------------------------


def grew(before: list[metrics.Sample], after: list[metrics.Sample], name: str, **labels) -> float:
    """How much counter ``name`` grew between two scrapes of one engine (0 when not exported)."""
    a, b = metrics.total(before, name, **labels), metrics.total(after, name, **labels)
    return 0.0 if a is None or b is None else max(0.0, b - a)


def served_by(before: dict, after: dict, prompt_tokens: int) -> list[str]:
    """The engines (target names) whose ``vllm:prompt_tokens`` grew by at least the request's
    prompt between their two scrapes: the one that served it, and any that served another
    request as long meanwhile."""
    return sorted(n for n in after if grew(before[n], after[n], PROMPT_TOKENS) >= prompt_tokens)


@dataclass(frozen=True)
class Split:
    """Where one engine's prompt tokens came from between two scrapes."""

    gpu: float  # vLLM's GPU prefix cache
    external: float  # loaded through the KV connector (LMCache's DRAM or S3 tier)
    computed: float
    remote_read_bytes: float  # of them from S3 (LMCache's counter; 0 when not exported)

    @property
    def hit(self) -> float:
        return self.gpu + self.external

    def tier(self) -> str:
        if self.external and self.remote_read_bytes:
            return "LMCache's S3 tier"
        if self.external:
            return "LMCache (DRAM tier)" if not self.gpu else "GPU prefix cache and LMCache"
        return "its GPU prefix cache"


def split(before: list[metrics.Sample], after: list[metrics.Sample], prompt: int) -> Split:
    """The prompt's sources on one engine: vLLM's by-source counter, else the older hit
    counters (computed: the rest of the prompt)."""
    if metrics.total(after, BY_SOURCE) is not None:
        gpu = grew(before, after, BY_SOURCE, source=GPU)
        external = grew(before, after, BY_SOURCE, source=EXTERNAL)
        computed = grew(before, after, BY_SOURCE, source=COMPUTED)
    else:
        gpu = grew(before, after, GPU_FALLBACK)
        external = grew(before, after, EXTERNAL_FALLBACK)
        computed = max(0.0, prompt - gpu - external)
    return Split(gpu, external, computed, grew(before, after, REMOTE_READ_BYTES))


def repeat_verdict(
    route: Route,
    cold: list[str],
    repeat: list[str],
    prompt_tokens: int,
    where: Split | None,
    loads: dict[str, int | None] | None = None,
) -> Verdict:
    """The repeat's verdict, from who served each request and where the repeat's prompt came
    from on the engine that served it.

    + cold, repeat: :func:`served_by` of each request
    + prompt_tokens: the document's prompt (the response's usage)
    + where: :func:`split` on the repeat's engine (None when it is not one engine)
    + loads: the router's load of each worker (target name), read when the repeat moved
    """
    head = f"{route.model} via {route.name}"
    if not cold or not repeat:
        which = "cold request" if not cold else "repeat"
        return Verdict(
            FAIL,
            f"{head}: no engine of the inventory counted the {which}'s {prompt_tokens} prompt "
            f"tokens ({PROMPT_TOKENS}): the router sent it to an engine verify.py does not know",
        )
    if len(cold) > 1 or len(repeat) > 1:
        return Verdict(
            WARN,
            f"{head}: not judged: {', '.join(sorted(set(cold) | set(repeat)))} each served "
            f"{prompt_tokens}+ prompt tokens meanwhile (other clients): which engine served the "
            "document is not known; run verify.py again when the fleet is quieter",
        )
    (holder,), (second,) = cold, repeat
    if second != holder:
        busy = {n: v for n, v in (loads or {}).items() if isinstance(v, int) and v > BALANCE_ABS}
        if busy:
            return Verdict(
                WARN,
                f"{head}: the repeat went to {second}, not {holder} which served it cold, while "
                f"{', '.join(f'{n} had {v} requests' for n, v in sorted(busy.items()))}: "
                'cache_aware\'s load balancing overrode the prefix (docs/router.md "Policy")',
            )
        return Verdict(
            FAIL,
            f"{head}: the repeat went to {second}, not {holder} which served it cold: the "
            f"router is not prefix-affine (the inventory's kvceph_router_policy is "
            f"{route.policy}: redeploy if {route.router}'s /etc/kvceph/router/{route.port}.json "
            "says otherwise)",
        )
    assert where is not None
    # vLLM serves whole blocks from its prefix cache and recomputes at least the last one
    # (16 tokens; 128 on Gaudi): at least half the prompt is a hit, none of it a recompute.
    if where.hit * 2 < prompt_tokens:
        return Verdict(
            FAIL,
            f"{head}: the repeat landed on {holder}, which served it cold, but recomputed "
            f"{where.computed:.0f} of {prompt_tokens} prompt tokens ({where.hit:.0f} from a "
            "cache): its prefix caching is off or evicted the document within a second "
            "(vLLM --enable-prefix-caching; GPU memory)",
        )
    return Verdict(
        PASS,
        f"{head}: {len(route.workers)}/{len(route.workers)} engines in the pool; cold on "
        f"{holder}, the repeat on {holder} too: {where.hit:.0f} of {prompt_tokens} prompt "
        f"tokens from {where.tier()}, {where.computed:.0f} computed",
    )


# --- The step --------------------------------------------------------------------------------


def check(runner, route: Route) -> StepResult:
    """The route's pool, then the repeat (module docstring); one StepResult."""
    start = runner.mono()
    try:
        result = _check(runner, route)
    except CheckFailed as exc:
        verdict = Verdict(FAIL, f"{route.model} via {route.name}: {exc}")
        result = StepResult(route.router, STEP, verdict)
    result.figures["seconds"] = round(runner.mono() - start, 3)
    return result


def _pool(runner, route: Route) -> list[dict]:
    """The route's workers once it is ready and lists every engine healthy, or at the end of
    :func:`readmit_seconds`: an engine verify.py just restarted comes back with one check, and a
    router the deploy just restarted listens once its first check of an engine passed."""
    http, start = runner.http, runner.mono()
    while True:
        status, body = http.get(f"{route.url}/readiness", timeout=10)
        if status == 401:
            raise CheckFailed(
                "/readiness: HTTP 401: the router refused the engines' key (it checks keys on "
                "its engines' /v1/models: are they up with the key verify.py has?)"
            )
        workers: list[dict] = []
        if status is not None:
            code, text = http.get(f"{route.url}/workers", timeout=10)
            if code != 200:
                raise CheckFailed(f"/workers: HTTP {code}: {' '.join(str(text).split())[:160]}")
            try:
                workers = answers.workers(text)
            except ValueError as exc:
                raise CheckFailed(str(exc)) from None
        settled = status == 200 and not pool_problems(route, workers)
        waited = runner.mono() - start
        if settled or waited >= readmit_seconds(route):
            if status is None:
                raise CheckFailed(
                    f"the router does not answer on {route.url} after {waited:.0f} s: {body} "
                    f"(systemctl status {route.unit} on {route.router})"
                )
            if status != 200:
                raise CheckFailed(
                    f"/readiness: HTTP {status}: no engine in the router's pool; "
                    + "; ".join(pool_problems(route, workers))
                )
            return workers
        runner.sleep(runner.o.poll_interval)


def _scrape_all(runner, route: Route) -> dict[str, list[metrics.Sample]]:
    """Every worker's /metrics, as verify.py reaches the engine (a failure names it)."""
    out = {}
    for _, t in route.workers:
        try:
            out[t.name] = runner.scrape(t)
        except CheckFailed as exc:
            raise CheckFailed(f"{t.name} {t.base_url}{exc}") from None
    return out


def _ask(runner, route: Route, nonce: str, tokens: int):
    """The routed document, streamed through the route: (result, scrapes before, after)."""
    before = _scrape_all(runner, route)
    body = {
        "model": route.model,
        "messages": [{"role": "user", "content": document.prompt(nonce, tokens)}],
        **answer.request_fields(answer.MIN_TOKENS),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = f"{route.url}/v1/chat/completions"
    result = runner.http.stream(url, body, runner.o.request_timeout)
    if result.ttft is None or not result.prompt_tokens:
        raise CheckFailed(f"the routed stream ended after {result.events} events without a token")
    return result, before, _scrape_all(runner, route)


def _check(runner, route: Route) -> StepResult:
    workers = _pool(runner, route)
    problems = pool_problems(route, workers)
    head = f"{route.model} via {route.name}"
    if problems:
        return StepResult(route.router, STEP, Verdict(FAIL, f"{head}: " + "; ".join(problems)))
    if route.policy == "round_robin":
        why = "repeat not checked: kvceph_router_policy round_robin keeps no prefix on an engine"
        verdict = Verdict(SKIP, f"{head}: {len(workers)}/{len(workers)} engines in the pool; {why}")
        return StepResult(route.router, STEP, verdict)
    t0 = route.workers[0][1]
    tokens = document_tokens(t0.chunk_size)
    nonce = f"{runner.nonce}-{route.port}-routed"
    cold, b1, a1 = _ask(runner, route, nonce, tokens)
    pt = cold.prompt_tokens
    holders = served_by(b1, a1, pt)
    again, b2, a2 = _ask(runner, route, nonce, tokens)
    seconds = served_by(b2, a2, pt)
    where = split(b2[seconds[0]], a2[seconds[0]], pt) if len(seconds) == 1 else None
    loads = None
    if holders != seconds and len(holders) == len(seconds) == 1:
        names = {url: t.name for url, t in route.workers}
        loads = {names.get(w["url"], w["url"]): w["load"] for w in _pool(runner, route)}
    verdict = repeat_verdict(route, holders, seconds, pt, where, loads)
    compared: dict = {}
    if cold.token_ids is not None:  # an engine that returns none: the pool's preflight says so
        server = seconds[0] if len(seconds) == 1 else route.name
        wrong, compared = answer.compare(cold.token_ids, again.token_ids, STEP, server)
        verdict = answer.judged(verdict, wrong)
    writer = {t.name: t for _, t in route.workers}.get(holders[0] if holders else "", t0)
    stored = bookkeeping.expected_objects(
        pt, writer.chunk_size, writer.tensor_parallel_size, writer.save_unfull_chunk
    )
    if stored and verdict.status != FAIL:
        # kvceph_lmcache_chunk_size below the document, or save_unfull_chunk: LMCache stored
        # it; verify.py lists no bucket for this step (its cost), so it says so.
        verdict = Verdict(
            verdict.status,
            f"{verdict.message}; LMCache stored the routed document ({stored} objects, left in "
            "the bucket: kvceph_lmcache_save_unfull_chunk or a chunk size below "
            f"{pt} tokens)",
        )
    return StepResult(
        route.router,
        STEP,
        verdict,
        hit_tokens=where.hit if where else None,
        figures={
            "route": route.url,
            "model": route.model,
            "prompt_tokens": pt,
            "cold_engine": holders,
            "repeat_engine": seconds,
            "cold_ttft_s": cold.ttft,
            "repeat_ttft_s": again.ttft,
            "repeat_sources": None
            if where is None
            else {
                "gpu": where.gpu,
                "external": where.external,
                "computed": where.computed,
                "remote_read_bytes": where.remote_read_bytes,
            },
            "workers": workers,
            "answer": compared or None,
        },
    )
