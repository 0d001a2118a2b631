"""The cold -> warm -> cold cycle across the inference hosts, as plain Python.

verify.py calls :func:`verify` once, from the controller, with the hosts' settings; the three
side-effecting collaborators are passed in so that tests can replace them:

- :class:`Http` talks to the engines' OpenAI API (``/health``, ``/v1/models``, ``/metrics``,
  chat completions, streamed for TTFT);
- a ``Bucket`` (:class:`Boto3Bucket` in production) lists and deletes objects;
- a ``Control`` restarts a host's engine unit and greps its journal (pyinfra SSH in verify.py).

Every wait and request is bounded by a setting; nothing retries without a limit.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from deploys import remote_tier
from deploys.verification import bookkeeping, document, metrics, sse, verdicts
from deploys.verification.bookkeeping import ObjectInfo
from deploys.verification.report import Report, StepResult
from deploys.verification.verdicts import FAIL, PASS, SKIP, WARN, Verdict

S3_DISABLED = "S3 connection disabled"


@dataclass(frozen=True)
class Target:
    """One inference host as the controller reaches it."""

    name: str
    base_url: str  # scheme://address:port, no trailing slash
    model: str
    tensor_parallel_size: int
    chunk_size: int
    save_unfull_chunk: bool
    health_timeout: int
    max_model_len: int
    # The `vllm serve` argument LMCache puts in its keys; "" when it is the model name (hub).
    serve_model: str = ""
    # kvceph_lmcache_connector; with "kvceph", lookups below min_hit_tokens report 0 hits.
    connector: str = "lmcache"
    min_hit_tokens: int = 0
    crossover: str = ""  # where min_hit_tokens came from (crossover.Crossover.describe())

    @property
    def prefix(self) -> str:
        return bookkeeping.object_prefix(self.serve_model or self.model, self.tensor_parallel_size)

    @property
    def host(self) -> str:
        """The host the engine runs on (names are ``host`` or ``host/engine``)."""
        return self.name.split("/", 1)[0]


def peers_of(a: Target, healthy: list[Target]) -> list[Target]:
    """Who must load A's chunks: another engine on A's host, and one on another host (each
    when there is one): reuse inside a host and across hosts are both proved."""
    same = [t for t in healthy if t.host == a.host and t.name != a.name]
    other = [t for t in healthy if t.host != a.host]
    return same[:1] + other[:1]


@dataclass(frozen=True)
class Options:
    """The figures of VerifySettings the cycle needs (kept separate: tests build it by hand)."""

    document_tokens: int = 16384
    output_tokens: int = 32
    warm_ratio: float = 1.0
    fallback_tolerance: float = 0.5
    request_timeout: int = 600
    restart_timeout: int = 180
    s3_timeout: float = 30
    objects_timeout: float = 120
    clock_skew: int = 120
    cleanup: bool = True
    poll_interval: float = 1.0

    @classmethod
    def from_settings(cls, vs) -> Options:
        return cls(
            document_tokens=vs.document_tokens,
            output_tokens=vs.output_tokens,
            warm_ratio=vs.warm_ratio,
            fallback_tolerance=vs.fallback_tolerance,
            request_timeout=vs.request_timeout,
            restart_timeout=vs.restart_timeout,
            s3_timeout=vs.s3_timeout,
            objects_timeout=vs.objects_timeout,
            clock_skew=vs.clock_skew,
            cleanup=vs.cleanup,
        )


class CheckFailed(RuntimeError):
    """A request or wait failed; the message is one line for the report."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class RestartFailed(CheckFailed):
    """The engine did not come back after a restart (unit or health), not a request fault."""


class Bucket(Protocol):
    endpoint: str

    def check(self) -> str | None: ...  # None, or why the bucket cannot be used

    def list(self, prefix: str) -> dict[str, ObjectInfo]: ...

    def delete(self, keys: list[str]) -> int: ...


class Control(Protocol):
    def restart(self, host: str, timeout: int) -> str | None: ...  # None, or the error

    def journal_has(self, host: str, since: float, text: str) -> bool | None: ...

    # LMCache's remote-backend lines since the engine started (remote_tier.PREFILTER), or None.
    def remote_tier(self, host: str) -> list[str] | None: ...


# --- HTTP ----------------------------------------------------------------------------------


class Http:
    """Bounded HTTP to one engine API (urllib: no extra dependency, honours timeouts).

    ``api_key`` (a ``Secret``, or None) is sent as ``Authorization: Bearer`` on every request.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, api_key=None):
        self.clock = clock
        self._api_key = api_key

    def _open(self, url: str, body: dict | None, timeout: float):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
        if self._api_key:
            req.add_header("Authorization", "Bearer " + str.__str__(self._api_key))
        if body is not None:
            req.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (http/https from settings)

    def get(self, url: str, timeout: float) -> tuple[int | None, str]:
        """(status, body); status None with the reason as body when unreachable."""
        try:
            with self._open(url, None, timeout) as resp:
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, _read_error(exc)
        except (OSError, ValueError) as exc:
            return None, _reason(exc)

    def post(self, url: str, body: dict, timeout: float) -> dict:
        try:
            with self._open(url, body, timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise CheckFailed(_http_failure(exc)) from None
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"{url}: {_reason(exc)}") from None

    def stream(self, url: str, body: dict, timeout: float) -> sse.StreamResult:
        """Send a streamed request; TTFT from the arrival of the first generated text."""
        deadline_note = f"no complete answer within {timeout}s (kvceph_verify_request_timeout)"
        t0 = self.clock()
        try:
            with self._open(url, body, timeout) as resp:

                def lines():
                    for line in resp:
                        now = self.clock()
                        if now - t0 > timeout:
                            raise CheckFailed(deadline_note)
                        yield now, line

                return sse.parse(lines(), t0)
        except urllib.error.HTTPError as exc:
            raise CheckFailed(_http_failure(exc)) from None
        except sse.StreamError as exc:
            raise CheckFailed(str(exc)) from None
        except TimeoutError:
            raise CheckFailed(deadline_note) from None
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"{url}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None)
    return f"{type(exc).__name__}: {inner or exc}"


def _read_error(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(2000).decode("utf-8", "replace")
    except OSError:
        return ""


def _http_failure(exc: urllib.error.HTTPError) -> str:
    body = _read_error(exc)
    try:
        err = json.loads(body)
        err = err.get("error", err)
        body = err.get("message", body) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        pass
    line = f"HTTP {exc.code} from {exc.url}: {' '.join(str(body).split())[:200]}"
    if exc.code == 401:
        line += f"; {verdicts.CAUSE_401}"
    return line


# --- S3 ------------------------------------------------------------------------------------


class Boto3Bucket:
    """The bucket as the controller sees it (path-style, bounded timeouts and retries)."""

    def __init__(
        self,
        endpoint: str,
        bucket: str,
        region: str,
        credentials,
        timeout: int,
        max_objects: int,
        ca_bundle: str | None = None,
    ):
        import boto3
        from botocore.config import Config

        self.endpoint, self.bucket, self.max_objects = endpoint, bucket, max_objects
        self._client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id=credentials.access_key.reveal(),
            aws_secret_access_key=credentials.secret_key.reveal(),
            # kvceph_s3_ca_bundle: RGW's private CA (None: botocore's own bundle).
            verify=ca_bundle,
            config=Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"max_attempts": 3, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    def check(self) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "?")
            hint = {
                "403": "credentials rejected (wrong key, or stray whitespace in it)",
                "404": "bucket does not exist (run deploy.py's S3 tier stage)",
            }.get(str(code), "S3 error")
            return f"S3 {self.endpoint} bucket {self.bucket}: HTTP {code}: {hint}"
        except BotoCoreError as exc:
            return f"S3 {self.endpoint} unreachable: {exc}: {verdicts.CAUSE_UNREACHABLE}"
        return None

    def list(self, prefix: str) -> dict[str, ObjectInfo]:
        return self._s3_call(f"list {prefix!r}", self._list, prefix)

    def delete(self, keys: list[str]) -> int:
        return self._s3_call(f"delete {len(keys)} objects", self._delete, keys)

    def _s3_call(self, what: str, fn, *args):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args)
        except (BotoCoreError, ClientError) as exc:
            raise CheckFailed(f"S3 {self.endpoint} bucket {self.bucket}: {what}: {exc}") from None

    def _list(self, prefix: str) -> dict[str, ObjectInfo]:
        out: dict[str, ObjectInfo] = {}
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": 1000}
        )
        for page in pages:
            for o in page.get("Contents", ()):
                out[o["Key"]] = ObjectInfo(o["Key"], int(o["Size"]), o["LastModified"])
            if len(out) > self.max_objects:
                raise CheckFailed(
                    f"more than {self.max_objects} objects under {prefix!r}: listing stopped "
                    "(raise kvceph_verify_max_listed_objects)"
                )
        return out

    def _delete(self, keys: list[str]) -> int:
        deleted = 0
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            resp = self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
            )
            errors = resp.get("Errors") or []
            if errors:
                e = errors[0]
                raise CheckFailed(f"delete {e.get('Key')}: {e.get('Code')} {e.get('Message')}")
            deleted += len(batch)
        return deleted


# --- The cycle ------------------------------------------------------------------------------


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
        # controller stores as the cache group's measurement (deploys/measured.py).
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
        before = self.scrape(t)
        body = {
            "model": t.model,
            "messages": [
                {"role": "user", "content": document.prompt(self.nonce, self.o.document_tokens)}
            ],
            "max_tokens": self.o.output_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        result = self.http.stream(f"{t.base_url}/v1/chat/completions", body, self.o.request_timeout)
        if result.ttft is None:
            raise CheckFailed(f"the stream ended after {result.events} events without a token")
        metric, delta = metrics.hit_delta(before, self.scrape(t))
        return result, metric, delta

    def restart(self, t: Target) -> None:
        error = self.control.restart(t.name, self.o.restart_timeout)
        if error:
            raise RestartFailed(f"restart failed: {error}")
        try:
            self.wait_health(t)
        except CheckFailed as exc:
            raise RestartFailed(f"after the restart: {exc}") from None

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

    def wait_objects(self, prefix: str, before: dict, since: datetime, expected: int) -> dict:
        """Poll the listing until the expected count of new objects appears (uploads lag)."""
        start = self.mono()
        while True:
            created = bookkeeping.created_since(
                before, self.bucket.list(prefix), since, self.o.clock_skew
            )
            if len(created) >= expected or self.mono() - start >= self.o.objects_timeout:
                return created
            self.sleep(self.o.poll_interval)

    def cycle(
        self, a: Target, b: Target | list[Target] | None, no_peer: str = "skipped: one host"
    ) -> None:
        """Cold on A, warm on A after a restart, cross-engine / cross-node on each peer (another
        engine of A's host, an engine of another host), fallback on A."""
        peers = [] if b is None else [b] if isinstance(b, Target) else list(b)
        add, o = self.report.add, self.o
        since_wall = self.wall()
        since = datetime.fromtimestamp(since_wall, UTC)
        try:
            before = self.bucket.list(a.prefix)
            cold, _, _ = self.ask(a)
        except CheckFailed as exc:
            add(StepResult(a.name, "cold", Verdict(FAIL, str(exc))))
            self._skip_rest(a, b, "the cold request failed")
            return
        pt = cold.prompt_tokens
        expected = (
            bookkeeping.expected_objects(
                pt, a.chunk_size, a.tensor_parallel_size, a.save_unfull_chunk
            )
            if pt
            else 0
        )
        created = self.wait_objects(a.prefix, before, since, expected) if expected else {}
        disabled = self.s3_disabled(a, since_wall) if len(created) < expected else None
        kv_bytes = sum(x.size for x in created.values())
        per_worker = bookkeeping.worker_counts(created)
        add(
            StepResult(
                a.name,
                "cold",
                verdicts.cold(pt, len(created), expected, disabled),
                ttft=cold.ttft,
                objects=len(created),
                figures={
                    "prompt_tokens": pt,
                    "expected_objects": expected,
                    "kv_bytes": kv_bytes,
                    "objects_per_worker": per_worker,
                },
            )
        )
        expected_hit = (
            bookkeeping.expected_hit_tokens(pt, a.chunk_size, a.save_unfull_chunk) if pt else 0
        )

        # Below the crossover kvceph's connector reports 0 hits: verify that, and measure
        # nothing (crossover.py: the load is measured only by a document above it).
        below = a.connector == "kvceph" and 0 < expected_hit < a.min_hit_tokens

        # Warm: a restart empties GPU and CPU caches, so every hit comes from the bucket.
        try:
            self.restart(a)
            warm, metric, hit = self.ask(a)
            if not below and hit is not None and hit >= expected_hit > 0 and cold.ttft:
                self.measured.append(
                    (
                        a,
                        {
                            "prompt_tokens": pt,
                            "cold_ttft_s": cold.ttft,
                            "warm_ttft_s": warm.ttft,
                            "kv_bytes": kv_bytes,
                        },
                    )
                )
            add(
                StepResult(
                    a.name,
                    "warm",
                    verdicts.below_crossover(
                        hit=hit, tokens=expected_hit, min_hit=a.min_hit_tokens, source=a.crossover
                    )
                    if below
                    else verdicts.warm(
                        hit=hit,
                        expected_hit=expected_hit,
                        metric=metric,
                        warm_ttft=warm.ttft,
                        cold_ttft=cold.ttft,
                        ratio=o.warm_ratio,
                        kv_bytes=kv_bytes,
                        objects=len(created),
                        s3_disabled=self.s3_disabled(a, since_wall) if not hit else None,
                        causes=self.lmcache_causes(a, since_wall)
                        if (hit or 0) < expected_hit
                        else (),
                    ),
                    ttft=warm.ttft,
                    hit_tokens=hit,
                    objects=len(created),
                    figures={
                        "metric": metric,
                        "expected_hit_tokens": expected_hit,
                        "ttft_ratio": warm.ttft / cold.ttft if cold.ttft else None,
                        "load_bytes_per_s": kv_bytes / warm.ttft if warm.ttft else None,
                        "break_even_bytes_per_s": kv_bytes / cold.ttft if cold.ttft else None,
                        "min_hit_tokens": a.min_hit_tokens if a.connector == "kvceph" else None,
                        "crossover": a.crossover,
                    },
                )
            )
        except CheckFailed as exc:
            causes = "".join(f"; {c}" for c in self.lmcache_causes(a, since_wall))
            add(StepResult(a.name, "warm", Verdict(FAIL, f"{exc}{causes}")))

        if not peers:
            add(
                StepResult(
                    a.name,
                    "cross-node",
                    Verdict(SKIP, no_peer),
                )
            )
        for b in peers:
            step = "cross-engine" if b.host == a.host else "cross-node"
            try:
                got, metric, hit = self.ask(b)
                add(
                    StepResult(
                        b.name,
                        step,
                        verdicts.below_crossover(
                            hit=hit,
                            tokens=expected_hit,
                            min_hit=a.min_hit_tokens,
                            source=a.crossover,
                        )
                        if below
                        else verdicts.cross_node(
                            hit=hit,
                            expected_hit=expected_hit,
                            metric=metric,
                            writer=a.name,
                            ttft=got.ttft,
                            cold_ttft=cold.ttft,
                            s3_disabled=self.s3_disabled(b, since_wall) if not hit else None,
                            causes=self.lmcache_causes(b, since_wall)
                            if (hit or 0) < expected_hit
                            else (),
                        ),
                        ttft=got.ttft,
                        hit_tokens=hit,
                        figures={"metric": metric, "expected_hit_tokens": expected_hit},
                    )
                )
            except CheckFailed as exc:
                causes = "".join(f"; {c}" for c in self.lmcache_causes(b, since_wall))
                add(StepResult(b.name, step, Verdict(FAIL, f"{exc}{causes}")))

        self.fallback(a, created, expected, cold.ttft)

    def fallback(self, a: Target, created: dict, expected: int, cold_ttft: float | None) -> None:
        add, o = self.report.add, self.o
        plan = bookkeeping.deletion_plan(created, expected, a.prefix, self.bucket.list(a.prefix))
        deleted, error, hit, got = 0, None, None, None
        refused = plan.refused
        if refused is None:
            try:
                deleted = self.bucket.delete(list(plan.keys))
                left = set(plan.keys) & set(self.bucket.list(a.prefix))
                if left:
                    refused = f"{len(left)} of the run's objects still listed after deletion"
                else:
                    self.restart(a)
                    got, _, hit = self.ask(a)
            except RestartFailed as exc:
                refused = f"{deleted} deleted, but {exc}"
            except CheckFailed as exc:
                error = str(exc)
        add(
            StepResult(
                a.name,
                "fallback",
                verdicts.fallback(
                    refused=refused,
                    deleted=deleted,
                    error=error,
                    hit=hit,
                    ttft=got.ttft if got else None,
                    cold_ttft=cold_ttft,
                    tolerance=o.fallback_tolerance,
                ),
                ttft=got.ttft if got else None,
                hit_tokens=hit,
                objects=deleted,
            )
        )
        if o.cleanup and plan.refused is None and got is not None:
            self.cleanup(a, plan.keys)

    def cleanup(self, a: Target, keys: tuple[str, ...]) -> None:
        """The fallback request wrote the document's chunks again: remove those same keys."""
        start = self.mono()
        wanted = set(keys)
        while True:
            present = sorted(wanted & set(self.bucket.list(a.prefix)))
            if len(present) == len(wanted) or self.mono() - start >= self.o.objects_timeout:
                break
            self.sleep(self.o.poll_interval)
        try:
            n = self.bucket.delete(present) if present else 0
            verdict = Verdict(PASS, f"{n} objects of this run removed again")
        except CheckFailed as exc:
            verdict = Verdict(WARN, f"could not remove this run's objects: {exc}")
        self.report.add(StepResult(a.name, "cleanup", verdict, objects=len(present)))

    def _skip_rest(self, a: Target, b: Target | None, why: str) -> None:
        for host, step in ((a, "warm"), (b or a, "cross-node"), (a, "fallback")):
            self.report.add(StepResult(host.name, step, Verdict(SKIP, f"skipped: {why}")))

    def run(self, groups: list[list[Target]]) -> Report:
        """Preflight every host, then one cycle per cache group."""
        self.report.groups = [[t.name for t in g] for g in groups]
        ok = {t.name: self.preflight(t) for g in groups for t in g}
        s3_ok = self.check_s3()
        for group in groups:
            healthy = [t for t in group if ok[t.name]]
            if not healthy or not s3_ok:
                why = "preflight failed" if not healthy else "the S3 endpoint check failed"
                a = group[0]
                self.report.add(StepResult(a.name, "cold", Verdict(SKIP, f"skipped: {why}")))
                self._skip_rest(a, None, why)
                continue
            self.log(
                f"kvceph verify {self.nonce}: cache group of {', '.join(t.name for t in group)}"
            )
            peers = peers_of(healthy[0], healthy)
            no_peer = (
                "skipped: one host in this cache group, nothing to compare"
                if len(group) == 1
                else "skipped: the other hosts of this cache group failed preflight"
            )
            try:
                self.cycle(healthy[0], peers, no_peer)
            except CheckFailed as exc:
                # A bucket listing or deletion failed between steps: stop this group, say where.
                self.report.add(
                    StepResult(healthy[0].name, "aborted", Verdict(FAIL, f"cycle aborted: {exc}"))
                )
        return self.report


__all__ = ["Boto3Bucket", "CheckFailed", "Http", "Options", "Runner", "Target", "WARN"]
