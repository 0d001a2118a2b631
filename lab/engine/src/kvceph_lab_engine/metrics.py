"""Prometheus text exposition with vLLM's metric names and labels.

Names, help texts, types, label names (model_name, engine[, source | finished_reason]) and
TTFT buckets follow vLLM 0.26.0's vllm/v1/metrics/loggers.py (PrometheusStatLogger) as
prometheus_client renders them: counters get a `_total` sample and `_created`, values are
floats, and labels are written sorted by name (``engine="0",model_name=...``), which is what a
real vLLM 0.26 /metrics shows (kvceph's tests/facts/status.EngineAnswers/vllm-0.26-h200-*.json).
Only the metrics the lab needs exist.
"""

from __future__ import annotations

import threading
import time

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
    7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
# vllm/v1/engine FinishReason (0.26.0): every reason gets its series, zero until one finishes so.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

COUNTERS = {
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:external_prefix_cache_queries": "External prefix cache queries from KV connector "
    "cross-instance cache sharing, in terms of number of queried tokens.",
    "vllm:external_prefix_cache_hits": "External prefix cache hits from KV connector "
    "cross-instance cache sharing, in terms of number of cached tokens.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
}


# LMCache 0.5.6's own counters (lmcache/observability.py PrometheusLogger), one series per
# worker, labelled model_name / role / served_model_name / worker_id. num_hit_tokens counts what
# a retrieve loaded from any tier, num_remote_read_bytes what its remote connector read
# (InstrumentedRemoteConnector wraps every remote connector, kvceph's plugin included:
# connector/tests/test_lmcache_plugin.py). The DRAM tier's share is the difference.
# num_stored_tokens counts what a store took (any tier), num_remote_write_requests the remote
# PUTs that succeeded (the wrapper counts after the PUT returns; a failed one raises first).
# They reach vLLM's /metrics only through prometheus_client's multiprocess directory
# (PROMETHEUS_MULTIPROC_DIR shared by the API server and the workers), as here.
LMCACHE_COUNTERS = {
    "lmcache:num_hit_tokens": "hit_tokens",
    "lmcache:num_remote_read_bytes": "remote_read_bytes",
    "lmcache:num_stored_tokens": "stored_tokens",
    "lmcache:num_remote_write_requests": "remote_write_requests",
    "lmcache:num_remote_write_bytes": "remote_write_bytes",
}


def _f(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    """A label set as prometheus_client writes it: sorted by name, values escaped."""
    return ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items()))


class Metrics:
    def __init__(
        self,
        model: str,
        info: dict[str, str] | None = None,
        lmcache: dict[str, str] | None = None,
        workers: int = 1,
    ):
        """+ lmcache: LMCache's labels (model_name, served_model_name), None: not exported.
        + workers: tensor-parallel workers, one LMCache series each."""
        self.model = model
        self.info = info or {}
        self.lmcache = lmcache
        self.workers = workers
        self.lmc = {k: 0.0 for k in LMCACHE_COUNTERS.values()}
        self._lock = threading.Lock()
        self.created = time.time()
        self.counters = {name: 0.0 for name in COUNTERS}
        self.by_source = {s: 0.0 for s in SOURCES}
        self.success: dict[str, float] = dict.fromkeys(FINISH_REASONS, 0.0)
        self.ttft_counts = [0] * len(TTFT_BUCKETS)
        self.ttft_sum = 0.0
        self.ttft_count = 0
        self.running = 0
        self.waiting = 0

    def record_prefill(
        self,
        *,
        prompt: int,
        local_hit: int,
        claimed: int,
        loaded: int,
        computed: int,
        remote_read_bytes: int = 0,
    ) -> None:
        """vLLM scheduler: connector queries = prompt - local hit, hits = external tokens
        the connector claimed; by-source counts what was really loaded/computed."""
        with self._lock:
            c = self.counters
            c["vllm:prompt_tokens"] += prompt
            c["vllm:prefix_cache_queries"] += prompt
            c["vllm:prefix_cache_hits"] += local_hit
            c["vllm:external_prefix_cache_queries"] += prompt - local_hit
            c["vllm:external_prefix_cache_hits"] += claimed
            c["vllm:prompt_tokens_cached"] += local_hit + loaded
            self.by_source["local_compute"] += computed
            self.by_source["local_cache_hit"] += local_hit
            self.by_source["external_kv_transfer"] += loaded
            self.lmc["hit_tokens"] += loaded
            self.lmc["remote_read_bytes"] += remote_read_bytes / self.workers

    def record_store(self, *, tokens: int, remote_puts: int, remote_bytes: int = 0) -> None:
        """A store: ``tokens`` taken by each worker; ``remote_puts`` S3 PUTs that succeeded
        and their ``remote_bytes`` (all workers')."""
        with self._lock:
            self.lmc["stored_tokens"] += tokens
            self.lmc["remote_write_requests"] += remote_puts / self.workers
            self.lmc["remote_write_bytes"] += remote_bytes / self.workers

    def record_ttft(self, seconds: float) -> None:
        with self._lock:
            self.ttft_sum += seconds
            self.ttft_count += 1
            for i, le in enumerate(TTFT_BUCKETS):
                if seconds <= le:
                    self.ttft_counts[i] += 1

    def record_finish(self, generated: int, reason: str) -> None:
        with self._lock:
            self.counters["vllm:generation_tokens"] += generated
            self.success[reason] = self.success.get(reason, 0.0) + 1

    def render(self) -> str:
        ids = {"model_name": self.model, "engine": "0"}
        base = _labels(**ids)
        by = lambda **extra: _labels(**ids, **extra)  # noqa: E731
        out: list[str] = []
        with self._lock:
            out += [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{base}}} {_f(self.running)}",
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{{{base}}} {_f(self.waiting)}",
            ]
            for name, help_text in COUNTERS.items():
                out += [
                    f"# HELP {name}_total {help_text}",
                    f"# TYPE {name}_total counter",
                    f"{name}_total{{{base}}} {_f(self.counters[name])}",
                    f"{name}_created{{{base}}} {_f(self.created)}",
                ]
            out += [
                "# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.",
                "# TYPE vllm:prompt_tokens_by_source_total counter",
            ]
            for s in SOURCES:
                out.append(
                    f"vllm:prompt_tokens_by_source_total{{{by(source=s)}}} {_f(self.by_source[s])}"
                )
            for s in SOURCES:
                out.append(
                    f"vllm:prompt_tokens_by_source_created{{{by(source=s)}}} {_f(self.created)}"
                )
            out += [
                "# HELP vllm:request_success_total Count of successfully processed requests.",
                "# TYPE vllm:request_success_total counter",
            ]
            for reason, v in self.success.items():
                out.append(f"vllm:request_success_total{{{by(finished_reason=reason)}}} {_f(v)}")
            name = "vllm:time_to_first_token_seconds"
            out += [
                f"# HELP {name} Histogram of time to first token in seconds.",
                f"# TYPE {name} histogram",
            ]
            for le, n in zip(TTFT_BUCKETS, self.ttft_counts, strict=True):
                out.append(f"{name}_bucket{{{by(le=_f(le))}}} {_f(n)}")
            out.append(f"{name}_bucket{{{by(le='+Inf')}}} {_f(self.ttft_count)}")
            out.append(f"{name}_count{{{base}}} {_f(self.ttft_count)}")
            out.append(f"{name}_sum{{{base}}} {_f(self.ttft_sum)}")
            out.append(f"{name}_created{{{base}}} {_f(self.created)}")
            if self.lmcache is not None:
                for name, key in LMCACHE_COUNTERS.items():
                    # prometheus_client's MultiProcessCollector: no _created, this HELP text.
                    out += [f"# HELP {name} Multiprocess metric", f"# TYPE {name} counter"]
                    for w in range(self.workers):
                        labels = _labels(**self.lmcache, role="worker", worker_id=str(w))
                        out.append(f"{name}_total{{{labels}}} {_f(self.lmc[key])}")
            if self.info:
                labels = _labels(**self.info)
                out += [
                    "# HELP kvceph_lab_engine_info kvceph lab engine (not vLLM) build and "
                    "deploy digest.",
                    "# TYPE kvceph_lab_engine_info gauge",
                    f"kvceph_lab_engine_info{{{labels}}} 1.0",
                ]
        return "\n".join(out) + "\n"
