"""The cold -> warm -> cold cycle across the inference hosts, as plain Python.

verify.py builds one :class:`Runner` per run, from the controller, with the hosts' settings and
its three side-effecting collaborators (deploys/verification/transport.py; tests replace them):
``Http`` (the engines' OpenAI API), a ``Bucket`` (finds objects by name, deletes them) and a
``Control`` (restarts an engine unit, greps its journal). The run's objects are named before
they are written (object_names.py): verify looks up and deletes those names only, never a
listing of the model's prefix, so it runs beside any other traffic. Each step of the cycle is
one method: ``cold``, ``warm``, ``cross``, ``fallback``. Every wait and request is bounded by a
setting. Every step after cold must also give the cold answer, token for token (answer.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from deploys.monitoring import metrics
from deploys.tier import remote_tier
from deploys.verification import (
    answer,
    bookkeeping,
    document,
    dram,
    mp,
    object_names,
    routed,
    sse,
    verdicts,
)
from deploys.verification.bookkeeping import ObjectInfo
from deploys.verification.report import LAB_ENGINE, Report, StepResult
from deploys.verification.targets import Options, Target, peers_of
from deploys.verification.transport import Bucket, CheckFailed, Control, Http, RestartFailed
from deploys.verification.verdicts import FAIL, PASS, SKIP, WARN, Verdict

S3_DISABLED = "S3 connection disabled"


@dataclass(frozen=True)
class Cold:
    """What the cold step leaves for the steps after it."""

    ttft: float | None
    created: dict[str, ObjectInfo]  # the run's objects found: name -> listing
    expected: int  # objects the cold request should have written
    expected_hit: int  # tokens a later request should hit
    kv_bytes: int
    since_wall: float  # wall clock before the cold request (journal greps start here)
    prompt_tokens: int | None = None
    # kvceph's connector reports 0 hits below its crossover: the later steps verify that, and
    # measure nothing (crossover.py: the load is measured only by a document above it).
    below_crossover: bool = False
    names: tuple[str, ...] = ()  # every object name the document gives (object_names.py)
    # The cold answer's token ids, which every later step must repeat (None: none to compare).
    answer: tuple[int, ...] | None = None


class Runner:
    def __init__(
        self,
        options: Options,
        bucket: Bucket,
        control: Control,
        http: Http | None = None,
        log: Callable[[str], None] = print,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        nonce: str | None = None,
    ):
        self.o, self.bucket, self.control = options, bucket, control
        self.http = http or Http(mono)
        self.log, self.wall, self.mono, self.sleep = log, wall, mono, sleep
        self.nonce = nonce or document.new_nonce(wall)
        started = datetime.fromtimestamp(wall(), UTC)
        self.report = Report(self.nonce, started.isoformat(timespec="seconds"))
        # (writer target, figures) of every warm step that loaded all its chunks: what the
        # controller stores as the cache group's measurement (deploys/tier/measured.py).
        self.measured: list[tuple[Target, dict]] = []

    # -- engine helpers --

    def wait_health(self, t: Target) -> float:
        """Seconds until /health answered 200; CheckFailed on 503 or timeout."""
        start = self.mono()
        last = "no answer"
        while True:
            status, body = self.http.get(f"{t.base_url}/health", timeout=10)
            if status == 200:
                return self.mono() - start
            if status == 503:
                raise CheckFailed(
                    "/health 503: the engine died; see journalctl -u vllm (a likely cause: "
                    f"{verdicts.CAUSE_CONNECTOR})"
                )
            last = f"HTTP {status}" if status else body
            if self.mono() - start >= t.health_timeout:
                raise CheckFailed(
                    f"/health not 200 within {t.health_timeout}s (kvceph_health_timeout): {last}"
                )
            self.sleep(self.o.poll_interval)

    def scrape(self, t: Target) -> list[metrics.Sample]:
        status, body = self.http.get(f"{t.base_url}/metrics", timeout=30)
        if status != 200:
            raise CheckFailed(f"/metrics: {f'HTTP {status}' if status else body}")
        return metrics.parse(body)

    def ask(self, t: Target) -> tuple[sse.StreamResult, str | None, float | None]:
        """The document, streamed: (result, hit metric, hit tokens delta)."""
        result, before, after = self.ask_scraped(t)
        metric, delta = metrics.hit_delta(before, after)
        return result, metric, delta

    def ask_scraped(
        self, t: Target, salt: str | None = None
    ) -> tuple[sse.StreamResult, list[metrics.Sample], list[metrics.Sample]]:
        """The document, streamed, with ``cache_salt`` when given: (result, /metrics before,
        /metrics after)."""
        before = self.scrape(t)
        body = {
            "model": t.model,
            "messages": self.messages(),
            **answer.request_fields(self.o.output_tokens),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if salt:
            body["cache_salt"] = salt
        result = self.http.stream(f"{t.base_url}/v1/chat/completions", body, self.o.request_timeout)
        if result.ttft is None:
            raise CheckFailed(f"the stream ended after {result.events} events without a token")
        return result, before, self.scrape(t)

    def messages(self) -> list[dict]:
        """The run's chat: its document and question, one user message."""
        return [{"role": "user", "content": document.prompt(self.nonce, self.o.document_tokens)}]

    def object_names(self, t: Target) -> tuple[list[int], list[str]]:
        """(prompt token ids, object names) of the run's document on ``t``: the engine's own
        /tokenize (vLLM's chat template and tokenizer), hashed as LMCache does."""
        lab = self.report.engines.get(t.name) == LAB_ENGINE
        why = object_names.mp_refusal(lab) if t.mp else object_names.refusal(t.hash_algorithm)
        if why:
            raise CheckFailed(why)
        answer = self.http.post(
            f"{t.base_url}/tokenize",
            {"model": t.model, "messages": self.messages()},
            timeout=min(120, self.o.request_timeout),
        )
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(x, int) for x in tokens):
            raise CheckFailed(f"/tokenize answered without token ids: {str(answer)[:120]}")
        if t.mp:
            return tokens, object_names.mp_names(
                tokens,
                model=t.key_model,
                world_size=t.tensor_parallel_size,
                chunk_size=t.chunk_size,
                prefix=t.mp_prefix,
            )
        try:
            names = object_names.names(
                tokens,
                model=t.key_model,
                world_size=t.tensor_parallel_size,
                chunk_size=t.chunk_size,
                save_unfull_chunk=t.save_unfull_chunk,
                algorithm=t.hash_algorithm,
                seed=t.hash_seed,
                kv_dtype=t.kv_dtype,
                namespace=t.namespace,
            )
        except ValueError as exc:
            raise CheckFailed(str(exc)) from None
        return tokens, names

    def restart(self, t: Target) -> None:
        error = self.control.restart(t.name, self.o.restart_timeout)
        if error:
            raise RestartFailed(f"restart failed: {error}")
        try:
            self.wait_health(t)
        except CheckFailed as exc:
            raise RestartFailed(f"after the restart: {exc}") from None

    def mp_clear_l1(self, t: Target) -> dict[str, float] | None:
        """MP: clear the host's server L1 (a restart leaves it full), then its hit counters
        as they stand, for the S3 step's per-tier figures."""
        error = self.control.mp_clear_l1(t.name)
        if error:
            raise CheckFailed(f"POST /cache/clear on {t.host}'s LMCache MP server: {error}")
        return mp.tier_hits(self.control.mp_metrics(t.name))

    def lmcache_causes(self, t: Target, since: float) -> tuple[str, ...]:
        """LMCache's own failure lines in the engine's journal since ``since``, as causes."""
        found = []
        for text, cause in verdicts.LMCACHE_LOG_CAUSES:
            try:
                if self.control.journal_has(t.name, since, text):
                    found.append(cause)
            except Exception:  # noqa: BLE001 - a diagnostic must not hide the verdict
                pass
        return tuple(found)

    def remote_tier(self, t: Target) -> remote_tier.Verdict:
        """What LMCache logged about the engine's remote tier since it started."""
        try:
            lines = self.control.remote_tier(t.name)
        except Exception:  # noqa: BLE001 - a diagnostic must not hide the verdict
            lines = None
        return remote_tier.verdict(lines) if lines is not None else remote_tier.Verdict("unknown")

    def s3_disabled(self, t: Target, since: float) -> bool | None:
        try:
            return self.control.journal_has(t.name, since, S3_DISABLED)
        except Exception:  # noqa: BLE001 - a diagnostic must not hide the verdict
            return None

    # -- steps --

    def preflight(self, t: Target) -> bool:
        add = self.report.add
        need = self.o.document_tokens + self.o.output_tokens + 64
        if need > t.max_model_len:
            why = (
                f"document of {self.o.document_tokens} tokens + output does not fit "
                f"max_model_len {t.max_model_len}; lower kvceph_verify_document_tokens"
            )
            add(StepResult(t.name, "preflight", Verdict(FAIL, why)))
            return False
        try:
            waited = self.wait_health(t)
            status, body = self.http.get(f"{t.base_url}/v1/models", timeout=30)
            if status != 200:
                raise CheckFailed(
                    f"/v1/models: {f'HTTP {status}' if status else body}"
                    + (f"; {verdicts.CAUSE_401}" if status == 401 else "")
                )
            try:
                listed = {m.get("id"): m.get("owned_by") for m in json.loads(body).get("data", [])}
            except (ValueError, AttributeError):
                raise CheckFailed("/v1/models: not an OpenAI model list") from None
            served = list(listed)
            # who answers: vLLM says "vllm", the lab engine "kvceph-lab-engine" (the chart says so)
            self.report.engines[t.name] = str(listed.get(t.model) or "unknown")
            if t.model not in served:
                raise CheckFailed(
                    f"/v1/models lists {served}, not the configured {t.model!r} (kvceph_model)"
                )
            answer = self.http.post(
                f"{t.base_url}/v1/chat/completions",
                {
                    "model": t.model,
                    "messages": [{"role": "user", "content": "Say OK."}],
                    "max_tokens": 8,
                    "temperature": 0,
                },
                timeout=min(120, self.o.request_timeout),
            )
            if not answer.get("choices"):
                raise CheckFailed(f"minimal request answered without choices: {str(answer)[:120]}")
            if t.mp:
                # MP: no remote tier in the engine; LMCache's own connector class must have run.
                wrong = mp.connector_verdict(
                    t.name, self.control.journal_has(t.name, 0, mp.EXTERNAL_LINE)
                )
                if wrong:
                    raise CheckFailed(wrong.message)
            else:
                tier = self.remote_tier(t)
                if tier.state == remote_tier.MISSING:
                    raise CheckFailed(
                        remote_tier.failure_message(t.name, "the engine", t.connector, tier)
                    )
        except CheckFailed as exc:
            add(StepResult(t.name, "preflight", Verdict(FAIL, f"{t.base_url}: {exc}")))
            return False
        add(
            StepResult(
                t.name,
                "preflight",
                Verdict(PASS, f"health after {waited:.1f}s, {t.model} listed, minimal request ok"),
            )
        )
        return True

    def check_s3(self) -> bool:
        try:
            error = self.bucket.check()
        except Exception as exc:  # noqa: BLE001 - any client fault is a failed check here
            error = f"S3 {self.bucket.endpoint}: {type(exc).__name__}: {exc}"
        verdict = Verdict(FAIL, error) if error else Verdict(PASS, f"{self.bucket.endpoint} ok")
        self.report.add(StepResult("controller", "s3", verdict))
        return not error

    def wait_objects(self, names: list[str] | tuple[str, ...]) -> dict[str, ObjectInfo]:
        """Look the run's objects up by name until all are there (uploads lag) or
        kvceph_verify_objects_timeout: name -> listing of those found."""
        start = self.mono()
        found: dict[str, ObjectInfo] = {}
        while True:
            found |= self.bucket.find([n for n in names if n not in found])
            if len(found) >= len(names) or self.mono() - start >= self.o.objects_timeout:
                return found
            self.sleep(self.o.poll_interval)

    def cycle(
        self, a: Target, b: Target | list[Target] | None, no_peer: str = "skipped: one host"
    ) -> None:
        """Cold on A, a same-node repeat on A (its DRAM tier), warm on A after a restart,
        cross-engine / cross-node on each peer (another engine of A's host, an engine of another
        host), fallback on A."""
        peers = [] if b is None else [b] if isinstance(b, Target) else list(b)
        cold = self.cold(a)
        if cold is None:
            self._skip_rest(a, peers, "the cold request failed")
            return
        self.dram(a, cold)
        self.warm(a, cold)
        self.cross(a, peers, cold, no_peer)
        self.fallback(a, cold)

    def cold(self, a: Target) -> Cold | None:
        """The document on A with nothing cached: its chunks must land in the bucket."""
        since_wall = self.wall()
        try:
            tokens, names = self.object_names(a)
            got, _, _ = self.ask(a)
            pt = got.prompt_tokens
            if pt and pt != len(tokens):
                raise CheckFailed(
                    f"/tokenize counted {len(tokens)} prompt tokens where the request used "
                    f"{pt}: the run's object names cannot be computed (engine's chat template "
                    "or tokenizer differs between the two routes)"
                )
        except CheckFailed as exc:
            self.report.add(StepResult(a.name, "cold", Verdict(FAIL, str(exc))))
            return None
        expected = (
            bookkeeping.expected_objects(
                pt, a.chunk_size, a.tensor_parallel_size, a.save_unfull_chunk
            )
            if pt
            else 0
        )
        expected_hit = (
            bookkeeping.expected_hit_tokens(pt, a.chunk_size, a.save_unfull_chunk) if pt else 0
        )
        below = a.connector == "kvceph" and 0 < expected_hit < a.min_hit_tokens
        if below and a.skip_short_puts and expected:
            # Nothing to wait for: one look after the uploads' usual lag.
            self.sleep(self.o.poll_interval)
            created = self.bucket.find(list(names))
            verdict = verdicts.cold_not_stored(pt, len(created), a.min_hit_tokens)
        else:
            created = self.wait_objects(names) if expected else {}
            disabled = self.s3_disabled(a, since_wall) if len(created) < expected else None
            verdict = verdicts.cold(pt, len(created), expected, disabled)
        unusable = answer.unusable(got.token_ids)
        if unusable and not verdict.failed:
            verdict = Verdict(FAIL, unusable)
        kv_bytes = sum(x.size for x in created.values())
        self.report.add(
            StepResult(
                a.name,
                "cold",
                verdict,
                ttft=got.ttft,
                objects=len(created),
                figures={
                    "prompt_tokens": pt,
                    "expected_objects": expected,
                    "kv_bytes": kv_bytes,
                    "objects_per_worker": bookkeeping.worker_counts(created),
                    "answer_tokens": len(got.token_ids or ()),
                    # the ids themselves: a report shows whether answers carry information
                    # (dummy weights on the H200)
                    "answer_ids": list(got.token_ids or ()),
                },
            )
        )
        return Cold(
            got.ttft,
            created,
            expected,
            expected_hit,
            kv_bytes,
            since_wall,
            pt,
            below,
            tuple(names),
            None if unusable else got.token_ids,
        )

    def _answered(
        self, step: str, t: Target, cold: Cold, got: sse.StreamResult, verdict: Verdict, figures
    ) -> Verdict:
        """``verdict`` with the answer check: ``t``'s answer in ``step`` against the cold one
        (figures["answer"] records the comparison); none when cold gave no usable answer (the
        cold step failed for it)."""
        if cold.answer is None:
            return verdict
        wrong, figures["answer"] = answer.compare(cold.answer, got.token_ids, step, t.name)
        return answer.judged(verdict, wrong)

    def _hit_diagnosis(self, t: Target, cold: Cold, hit: int | None) -> dict:
        """Why a hit fell short, read only when it did (journal greps cost an SSH round trip)."""
        short = (hit or 0) < cold.expected_hit
        return {
            "s3_disabled": self.s3_disabled(t, cold.since_wall) if not hit else None,
            "causes": self.lmcache_causes(t, cold.since_wall) if short else (),
            "refused": self.refused(t, cold.since_wall) if short else None,
        }

    def refused(self, t: Target, since: float) -> bool | None:
        """kvceph's connector refused a GET body since ``since`` (its crc32c check)."""
        try:
            return self.control.journal_has(t.name, since, verdicts.LOG_CHECKSUM)
        except Exception:  # noqa: BLE001 - a diagnostic must not hide the verdict
            return None

    def dram(self, a: Target, cold: Cold) -> None:
        """A again, no restart, with the run's cache_salt (deploys/verification/dram.py): every
        chunk from the node's DRAM tier, none from S3, TTFT at most cold x dram_ratio."""
        if not a.local_cpu:
            why = "skipped: the DRAM tier is off (kvceph_lmcache_local_cpu: false)"
            self.report.add(StepResult(a.name, "dram", Verdict(SKIP, why)))
            return
        try:
            got, before, after = self.ask_scraped(a, dram.salt(self.nonce))
        except CheckFailed as exc:
            self._failed(a, "dram", exc, cold)
            return
        metric, hit = metrics.hit_delta(before, after)
        gpu_hit = dram.delta(before, after, dram.GPU_HITS)
        remote_read = dram.delta(before, after, dram.REMOTE_READ_BYTES)
        figures = {
            "metric": metric,
            "expected_hit_tokens": cold.expected_hit,
            "gpu_prefix_hit_tokens": gpu_hit,
            "remote_read_bytes": remote_read,
            "ttft_ratio": got.ttft / cold.ttft if cold.ttft else None,
            "threshold": self.o.dram_ratio,
        }
        self.report.add(
            StepResult(
                a.name,
                "dram",
                self._answered(
                    "dram",
                    a,
                    cold,
                    got,
                    dram.repeat(
                        hit=hit,
                        expected_hit=cold.expected_hit,
                        metric=metric,
                        gpu_hit=gpu_hit,
                        remote_read=remote_read,
                        ttft=got.ttft,
                        cold_ttft=cold.ttft,
                        ratio=self.o.dram_ratio,
                        kv_bytes=cold.kv_bytes,
                    ),
                    figures,
                ),
                ttft=got.ttft,
                hit_tokens=hit,
                figures=figures,
            )
        )

    def warm(self, a: Target, cold: Cold) -> None:
        """A after a restart: a restart empties GPU and CPU caches, so every hit is the bucket's."""
        try:
            self.restart(a)
            before = self.mp_clear_l1(a) if a.mp else None
            got, metric, hit = self.ask(a)
            full = hit is not None and hit >= cold.expected_hit > 0
            figures = {
                "metric": metric,
                "expected_hit_tokens": cold.expected_hit,
                "ttft_ratio": got.ttft / cold.ttft if cold.ttft else None,
                "load_bytes_per_s": cold.kv_bytes / got.ttft if got.ttft else None,
                "break_even_bytes_per_s": cold.kv_bytes / cold.ttft if cold.ttft else None,
                "min_hit_tokens": a.min_hit_tokens if a.connector == "kvceph" else None,
                "crossover": a.crossover,
            }
            hit_verdict = self._verdict(
                verdicts.warm,
                a,
                a,
                cold,
                hit,
                metric,
                warm_ttft=got.ttft,
                ratio=self.o.warm_ratio,
                kv_bytes=cold.kv_bytes,
                objects=len(cold.created),
            )
            if a.mp:
                delta = mp.tier_delta(before, mp.tier_hits(self.control.mp_metrics(a.name)))
                figures["mp_tier_hit_tokens"] = delta
                hit_verdict = mp.s3_step_verdict(a.name, delta, cold.expected_hit) or hit_verdict
            verdict = self._answered("warm", a, cold, got, hit_verdict, figures)
            # A load that gave another answer measures nothing.
            if not verdict.failed and not cold.below_crossover and full and cold.ttft:
                measured = {"prompt_tokens": cold.prompt_tokens, "cold_ttft_s": cold.ttft}
                measured |= {"warm_ttft_s": got.ttft, "kv_bytes": cold.kv_bytes}
                self.measured.append((a, measured))
            self.report.add(
                StepResult(
                    a.name,
                    "warm",
                    verdict,
                    ttft=got.ttft,
                    hit_tokens=hit,
                    objects=len(cold.created),
                    figures=figures,
                )
            )
        except CheckFailed as exc:
            self._failed(a, "warm", exc, cold)

    def cross(self, a: Target, peers: list[Target], cold: Cold, no_peer: str) -> None:
        """Each peer asks the same document: its hits are A's objects (another engine of A's
        host: cross-engine; another host: cross-node)."""
        if not peers:
            self.report.add(StepResult(a.name, "cross-node", Verdict(SKIP, no_peer)))
        for b in peers:
            step = "cross-engine" if b.host == a.host else "cross-node"
            try:
                got, metric, hit = self.ask(b)
                figures = {"metric": metric, "expected_hit_tokens": cold.expected_hit}
                verdict = self._verdict(
                    verdicts.cross_node, a, b, cold, hit, metric, writer=a.name, ttft=got.ttft
                )
                self.report.add(
                    StepResult(
                        b.name,
                        step,
                        self._answered(step, b, cold, got, verdict, figures),
                        ttft=got.ttft,
                        hit_tokens=hit,
                        figures=figures,
                    )
                )
            except CheckFailed as exc:
                self._failed(b, step, exc, cold)

    def _verdict(self, judge, a: Target, t: Target, cold: Cold, hit, metric, **more) -> Verdict:
        """``t``'s verdict on A's document: below A's crossover, :meth:`_below`'s; else
        ``judge``'s (verdicts.warm, verdicts.cross_node) on the hit, with ``more`` of its
        arguments and, when the hit fell short, the diagnosis."""
        if cold.below_crossover:
            return self._below(a, cold, hit)
        return judge(
            hit=hit,
            expected_hit=cold.expected_hit,
            metric=metric,
            cold_ttft=cold.ttft,
            **more,
            **self._hit_diagnosis(t, cold, hit),
        )

    @staticmethod
    def _below(a: Target, cold: Cold, hit: int | None) -> Verdict:
        """A document below the writer's crossover: kvceph's connector must report 0 hits."""
        return verdicts.below_crossover(
            hit=hit, tokens=cold.expected_hit, min_hit=a.min_hit_tokens, source=a.crossover
        )

    def _failed(self, t: Target, step: str, exc: CheckFailed, cold: Cold) -> None:
        causes = "".join(f"; {c}" for c in self.lmcache_causes(t, cold.since_wall))
        self.report.add(StepResult(t.name, step, Verdict(FAIL, f"{exc}{causes}")))

    def fallback(self, a: Target, cold: Cold) -> None:
        """Delete the run's objects (by name: nothing else is touched), restart A, resend: the
        document is computed again, at about the cold TTFT."""
        add, o = self.report.add, self.o
        keys = sorted(x.key for x in cold.created.values())
        deleted, error, hit, got = 0, None, None, None
        refused = None if keys else "the cold request created no objects; nothing of it to delete"
        if not keys and cold.below_crossover and a.skip_short_puts:
            why = "skipped: kvceph_skip_short_puts stored nothing of a document below the crossover"
            add(StepResult(a.name, "fallback", Verdict(SKIP, why)))
            return
        if refused is None:
            # A bucket fault here is no fallback verdict: it aborts the group (Runner.run).
            deleted = self.bucket.delete(keys)
            left = self.bucket.find(list(cold.created))
            if left:
                refused = f"{len(left)} of the run's objects still listed after deletion"
        if refused is None:
            try:
                self.restart(a)
                if a.mp:  # the server's L1 still holds the deleted chunks
                    self.mp_clear_l1(a)
                got, _, hit = self.ask(a)
            except RestartFailed as exc:
                refused = f"{deleted} deleted, but {exc}"
            except CheckFailed as exc:
                error = str(exc)
        verdict = verdicts.fallback(
            refused=refused,
            deleted=deleted,
            error=error,
            hit=hit,
            ttft=got.ttft if got else None,
            cold_ttft=cold.ttft,
            tolerance=o.fallback_tolerance,
        )
        figures: dict = {}
        if got is not None:  # recomputed after a restart: the cold answer again
            verdict = self._answered("fallback", a, cold, got, verdict, figures)
        add(
            StepResult(
                a.name,
                "fallback",
                verdict,
                ttft=got.ttft if got else None,
                hit_tokens=hit,
                objects=deleted,
                figures=figures,
            )
        )
        if o.cleanup and keys:
            self.cleanup(a, cold.names, rewritten=got is not None)

    def cleanup(self, a: Target, names: tuple[str, ...], rewritten: bool) -> None:
        """Remove the run's objects again, by name: those the fallback request wrote back
        (``rewritten``: waited for, uploads lag) and any left; never another object."""
        found = self.wait_objects(names) if rewritten else self.bucket.find(list(names))
        keys = sorted(x.key for x in found.values())
        try:
            n = self.bucket.delete(keys) if keys else 0
            verdict = Verdict(PASS, f"{n} objects of this run removed again")
        except CheckFailed as exc:
            verdict = Verdict(WARN, f"could not remove this run's objects: {exc}")
        self.report.add(StepResult(a.name, "cleanup", verdict, objects=len(keys)))

    def _skip_rest(self, a: Target, peers: list[Target] | None, why: str) -> None:
        """The steps after a failed cold one, each a SKIP naming why (a cross step per peer)."""
        crossing = [(p, "cross-node") for p in peers or [a]]
        for host, step in ((a, "dram"), (a, "warm"), *crossing, (a, "fallback")):
            self.report.add(StepResult(host.name, step, Verdict(SKIP, f"skipped: {why}")))

    def run(
        self,
        groups: list[list[Target]],
        routes: list[routed.Route] | None = None,
        canaries: tuple[str, ...] = (),
    ) -> Report:
        """Preflight every host, the router step of each route (``routes``: every route of the
        inventory's router hosts), then one cycle per cache group; with ``router_only`` the
        router step alone. With ``canaries`` (kvceph_verify_canary_hosts), the writer A, the
        only engine restarted, is the group's canary host's engine, and a group whose canary
        failed preflight restarts nothing."""
        self.report.groups = [[t.name for t in g] for g in groups]
        if self.o.router_only:
            if not routes:
                why = (
                    "kvceph_verify_router_only = True: the inventory has no host in group "
                    "router; fix: leave it out, or add the router host (docs/router.md)"
                )
                self.report.add(StepResult("controller", routed.STEP, Verdict(FAIL, why)))
            for route in routes or ():
                self.report.add(routed.check(self, route))
            return self.report
        ok = {t.name: self.preflight(t) for g in groups for t in g}
        s3_ok = self.check_s3()
        # Before the cycles: their restarts would take an engine out of a route's pool.
        for route in routes or ():
            self.report.add(routed.check(self, route))
        for group in groups:
            healthy = [t for t in group if ok[t.name]]
            if not healthy or not s3_ok:
                why = "preflight failed" if not healthy else "the S3 endpoint check failed"
                a = group[0]
                self.report.add(StepResult(a.name, "cold", Verdict(SKIP, f"skipped: {why}")))
                self._skip_rest(a, None, why)
                continue
            writers = [t for t in healthy if t.host in canaries] if canaries else healthy
            if not writers:
                why = "the canary failed preflight (kvceph_verify_canary_hosts): no restart"
                self.report.add(StepResult(group[0].name, "cold", Verdict(SKIP, f"skipped: {why}")))
                self._skip_rest(group[0], None, why)
                continue
            a = writers[0]
            self.log(
                f"kvceph verify {self.nonce}: cache group of {', '.join(t.name for t in group)}"
                + (f"; canary {a.name} (the only engine restarted)" if canaries else "")
            )
            peers = peers_of(a, healthy)
            no_peer = (
                "skipped: one host in this cache group, nothing to compare"
                if len(group) == 1
                else "skipped: the other hosts of this cache group failed preflight"
            )
            try:
                self.cycle(a, peers, no_peer)
            except CheckFailed as exc:
                # A bucket lookup or deletion failed between steps: stop this group, say where.
                self.report.add(
                    StepResult(a.name, "aborted", Verdict(FAIL, f"cycle aborted: {exc}"))
                )
        return self.report


__all__ = ["Cold", "Runner", "WARN"]
