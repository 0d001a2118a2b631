"""verify.py's router step (deploys/verification/routed.py): who served each request and from
where, read from the engines' counters (real vLLM 0.26 names, tests/facts/status.EngineAnswers);
the route's view of its workers (vllm-router's own /workers, tests/facts/status.RouterAnswers);
the whole step through a Runner against a fake router and fake engines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploys.monitoring import metrics
from deploys.router import answers
from deploys.verification import routed, runner, targets
from deploys.verification.sse import StreamResult

ROOT = Path(__file__).resolve().parents[2]
MODEL = "Qwen/Qwen3-32B"
ROUTER = "http://10.213.9.11:8100"


def target(name: str, port: int = 8000) -> targets.Target:
    return targets.Target(
        name=name,
        base_url=f"http://{name}:{port}",
        model=MODEL,
        tensor_parallel_size=1,
        chunk_size=256,
        save_unfull_chunk=False,
        health_timeout=2,
        max_model_len=40960,
    )


NAMES = ("gpu1", "gpu2", "gaudi1")
ROUTE = routed.Route(
    router="ceph1",
    url=ROUTER,
    model=MODEL,
    policy="cache_aware",
    workers=tuple((f"http://{n}:8000", target(n)) for n in NAMES),
)


def recorded_router(case: str) -> dict:
    """The /workers text the real vllm-router 0.1.17 answered (status.RouterAnswers fixture)."""
    fixture = json.loads((ROOT / f"tests/facts/status.RouterAnswers/{case}.json").read_text())
    return json.loads(fixture["output"][-1])


# --- Engines' counters -------------------------------------------------------------------------


def vllm_metrics(prompt=0.0, gpu=0.0, external=0.0, computed=0.0, remote=None) -> str:
    """/metrics as vLLM 0.26 writes them (prometheus_client: _total and _created samples)."""
    base = 'engine="0",model_name="Qwen/Qwen3-32B"'
    src = "vllm:prompt_tokens_by_source"
    lines = [
        f"vllm:prompt_tokens_total{{{base}}} {prompt}",
        f"vllm:prompt_tokens_created{{{base}}} 1.79e+09",
        f"vllm:prefix_cache_hits_total{{{base}}} {gpu}",
        f'{src}_total{{{base},source="local_compute"}} {computed}',
        f'{src}_total{{{base},source="local_cache_hit"}} {gpu}',
        f'{src}_total{{{base},source="external_kv_transfer"}} {external}',
        f'{src}_created{{{base},source="local_compute"}} 1.79e+09',
    ]
    if remote is not None:
        lines.append(f'lmcache:num_remote_read_bytes_total{{worker_id="0"}} {remote}')
    return "\n".join(lines) + "\n"


def test_the_real_vllm_counters_split_a_prompt_by_source():
    fixture = ROOT / "tests/facts/status.EngineAnswers/vllm-0.26-h200-warm-sync.json"
    after = metrics.parse(json.loads(json.loads(fixture.read_text())["output"][-1])["metrics"])
    # The same process before that request: every counter of it at zero.
    before = [metrics.Sample(s.name, s.labels, 0.0) for s in after]
    got = routed.split(before, after, 16450)
    assert (got.gpu, got.external, got.computed) == (0.0, 16384.0, 66.0)
    assert routed.served_by({"h200": before}, {"h200": after}, 16450) == ["h200"]
    assert routed.served_by({"h200": before}, {"h200": after}, 16451) == []


def test_without_the_by_source_counter_the_older_hit_counters_serve():
    before = metrics.parse('vllm:prefix_cache_hits_total{engine="0"} 100\n')
    after = metrics.parse('vllm:prefix_cache_hits_total{engine="0"} 260\n')
    got = routed.split(before, after, 170)
    assert (got.gpu, got.external, got.computed) == (160.0, 0.0, 10.0)
    assert got.tier() == "its GPU prefix cache"


def test_the_tier_is_named_from_the_counters():
    assert routed.Split(0, 512, 1, 4096).tier() == "LMCache's S3 tier"
    assert routed.Split(0, 512, 1, 0).tier() == "LMCache (DRAM tier)"
    assert routed.Split(160, 0, 12, 0).tier() == "its GPU prefix cache"


# --- The pool ------------------------------------------------------------------------------------


def test_the_real_routers_workers_parse_and_a_healthy_pool_has_no_problem():
    answer = recorded_router("three-engines-healthy")
    workers = answers.workers(answer["workers"])
    assert [w["healthy"] for w in workers] == [True, True, True]
    lab = routed.Route(
        "ceph1",
        ROUTER,
        MODEL,
        "cache_aware",
        tuple((w["url"], target(f"e{i}")) for i, w in enumerate(workers)),
    )
    assert routed.pool_problems(lab, workers) == []


def test_an_engine_out_of_the_pool_is_named_with_the_likely_cause():
    answer = recorded_router("gpu2-stopped")
    workers = answers.workers(answer["workers"])
    down = [w["url"] for w in workers if not w["healthy"]]
    assert len(down) == 1 and down[0].endswith(":8000")
    lab = routed.Route(
        "ceph1",
        ROUTER,
        MODEL,
        "cache_aware",
        tuple((w["url"], target("gpu2" if w["url"] in down else w["url"])) for w in workers),
    )
    (problem,) = routed.pool_problems(lab, workers)
    assert problem.startswith(f"gpu2 ({down[0]}) out of the pool: the router's /health checks")
    assert "ceph1 is not in its kvceph_vllm_open_networks" in problem


def test_a_stale_config_is_named_both_ways():
    listed = [
        {"url": "http://gpu1:8000", "healthy": True},
        {"url": "http://old:8000", "healthy": True},
    ]
    problems = routed.pool_problems(ROUTE, listed)
    assert problems[0].startswith("gpu2 (http://gpu2:8000) not among its workers (redeploy")
    assert (
        problems[2]
        == "http://old:8000 is a worker but no engine of the inventory (redeploy: stale config)"
    )


def test_not_a_worker_list_is_one_line():
    with pytest.raises(ValueError, match="^/workers: not vllm-router's worker list: '<html>"):
        answers.workers("<html>\n<body>nginx</body>")


# --- The verdict ---------------------------------------------------------------------------------


def test_a_repeat_on_the_holder_from_its_gpu_cache_passes():
    v = routed.repeat_verdict(ROUTE, ["gpu1"], ["gpu1"], 170, routed.Split(160, 0, 10, 0))
    assert v.status == "pass"
    assert v.message == (
        "Qwen/Qwen3-32B via ceph1:8100: 3/3 engines in the pool; cold on gpu1, the repeat on "
        "gpu1 too: 160 of 170 prompt tokens from its GPU prefix cache, 10 computed"
    )


def test_a_repeat_elsewhere_fails_naming_both_engines_and_the_policy():
    v = routed.repeat_verdict(ROUTE, ["gpu1"], ["gpu2"], 170, routed.Split(0, 0, 170, 0))
    assert v.status == "fail"
    assert "the repeat went to gpu2, not gpu1 which served it cold" in v.message
    assert "the inventory's kvceph_router_policy is cache_aware: redeploy if ceph1's" in v.message


def test_a_repeat_moved_by_the_routers_load_balancing_is_a_warning():
    loads = {"gpu1": 90, "gpu2": 3, "gaudi1": 2}
    v = routed.repeat_verdict(ROUTE, ["gpu1"], ["gpu2"], 170, None, loads)
    assert v.status == "warn" and "gpu1 had 90 requests" in v.message


def test_a_recomputed_repeat_on_the_holder_fails():
    v = routed.repeat_verdict(ROUTE, ["gpu1"], ["gpu1"], 170, routed.Split(0, 0, 170, 0))
    assert v.status == "fail" and "recomputed 170 of 170 prompt tokens" in v.message


def test_other_clients_traffic_is_a_warning_never_a_failure():
    v = routed.repeat_verdict(ROUTE, ["gpu1", "gpu2"], ["gpu1"], 170, None)
    assert v.status == "warn" and v.message.startswith(
        "Qwen/Qwen3-32B via ceph1:8100: not judged: gpu1, gpu2 each served"
    )


def test_a_request_no_known_engine_counted_fails():
    v = routed.repeat_verdict(ROUTE, [], ["gpu1"], 170, None)
    assert v.status == "fail" and "no engine of the inventory counted the cold request" in v.message


def test_the_routed_document_stays_below_one_chunk():
    assert routed.document_tokens(256) == 128
    assert routed.document_tokens(64) == 64


# --- The step through a Runner, against a fake router and fake engines ------------------------


class Engine:
    """An engine's counters: vLLM's prefix cache remembers the prompts it computed."""

    def __init__(self):
        self.prompt = self.gpu = self.computed = 0.0
        self.cached: set[str] = set()

    def serve(self, text: str) -> int:
        tokens = len(text.split())
        self.prompt += tokens
        if text in self.cached:
            hit = (tokens - 1) // 16 * 16
            self.gpu += hit
            self.computed += tokens - hit
        else:
            self.cached.add(text)
            self.computed += tokens
        return tokens


class FakeHttp:
    """The route and its engines as verify.py's Http sees them."""

    def __init__(self, pick):
        self.engines = {n: Engine() for n in NAMES}
        self.pick = pick  # (text, previous holder) -> engine name
        self.healthy = dict.fromkeys(NAMES, True)
        self.readiness = 200
        self.last = None
        self.asked: list[str] = []
        self.answers: list[tuple[int, ...]] = []  # token ids of each answer in turn; []: none
        self.bodies: list[dict] = []

    def get(self, url, timeout):
        self.asked.append(url)
        if url == f"{ROUTER}/readiness":
            return self.readiness, ""
        if url == f"{ROUTER}/workers":
            listed = [
                {"url": f"http://{n}:8000", "is_healthy": self.healthy[n], "load": 0} for n in NAMES
            ]
            return 200, json.dumps({"workers": listed, "total": 3})
        m = re.fullmatch(r"http://(\w+):8000/metrics", url)
        e = self.engines[m.group(1)]
        return 200, vllm_metrics(e.prompt, e.gpu, 0.0, e.computed)

    def stream(self, url, body, timeout):
        assert url == f"{ROUTER}/v1/chat/completions" and body["model"] == MODEL
        text = body["messages"][0]["content"]
        name = self.pick(text, self.last)
        self.last = name
        tokens = self.engines[name].serve(text)
        self.bodies.append(body)
        ids = self.answers.pop(0) if self.answers else None
        return StreamResult(0.01, "ok", {"prompt_tokens": tokens}, "length", 3, True, ids)


def run_step(http, route=ROUTE, **opts):
    """The run's Runner on a clock that moves only when it sleeps."""
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    options = targets.Options(poll_interval=0.5, **opts)
    r = runner.Runner(
        options, None, None, http=http, log=lambda _m: None, mono=lambda: now[0], sleep=sleep
    )
    return r.run([], [route])


def test_an_affine_router_passes_and_names_the_engine_and_tier():
    http = FakeHttp(lambda text, last: last or "gaudi1")
    (step,) = run_step(http, router_only=True).steps
    assert (step.host, step.step, step.verdict.status) == ("ceph1", "router", "pass")
    assert "cold on gaudi1, the repeat on gaudi1 too" in step.verdict.message
    assert step.figures["cold_engine"] == step.figures["repeat_engine"] == ["gaudi1"]
    # no engine preflight, no bucket: the router step alone
    assert not any(u.endswith("/health") or "/v1/models" in u for u in http.asked)


def test_the_repeat_must_give_the_cold_answer_token_for_token():
    http = FakeHttp(lambda text, last: last or "gaudi1")
    cold = tuple(range(100, 116))
    http.answers = [cold, cold]
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.status == "pass" and step.figures["answer"]["equal"] is True
    assert all(b["temperature"] == 0 and b["max_tokens"] >= 16 for b in http.bodies)
    assert all(b["logprobs"] and b["return_tokens_as_token_ids"] for b in http.bodies)
    http = FakeHttp(lambda text, last: last or "gaudi1")
    http.answers = [cold, cold[:3] + (7,) + cold[4:]]
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.status == "fail"
    assert step.verdict.message.startswith(
        "wrong answer from the router's repeat on gaudi1: first differing token at position 3 "
        "of 16 (cold 103, gaudi1 7)"
    )
    assert step.figures["answer"]["first_difference"] == 3


def test_a_router_that_spreads_repeats_fails():
    order = iter(["gpu1", "gpu2"])
    http = FakeHttp(lambda text, last: next(order))
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.status == "fail"
    assert "the repeat went to gpu2, not gpu1 which served it cold" in step.verdict.message


def test_an_engine_out_of_the_pool_fails_after_the_readmission_wait():
    http = FakeHttp(lambda text, last: "gpu1")
    http.healthy["gpu2"] = False
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.status == "fail" and "gpu2 (http://gpu2:8000) out of the pool" in (
        step.verdict.message
    )
    # it asked again until the bound (2 x (1 s interval + 2 s check timeout)), then judged
    assert http.asked.count(f"{ROUTER}/workers") == 13


def test_a_router_that_is_not_ready_fails_in_one_line():
    http = FakeHttp(lambda text, last: "gpu1")
    http.readiness = 503
    http.healthy = dict.fromkeys(NAMES, False)
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.status == "fail"
    assert step.verdict.message.startswith(
        "Qwen/Qwen3-32B via ceph1:8100: /readiness: HTTP 503: no engine in the router's pool"
    )


def test_round_robin_checks_the_pool_only():
    http = FakeHttp(lambda text, last: "gpu1")
    route = routed.Route(**{**vars(ROUTE), "policy": "round_robin"})
    (step,) = run_step(http, route, router_only=True).steps
    assert step.verdict.status == "skip" and "round_robin keeps no prefix" in step.verdict.message
    assert not any("/metrics" in u for u in http.asked)


def test_router_only_without_a_router_group_fails_saying_so():
    r = runner.Runner(targets.Options(router_only=True), None, None, http=FakeHttp(None))
    (step,) = r.run([], []).steps
    assert step.verdict.status == "fail" and "no host in group router" in step.verdict.message


def test_a_router_that_does_not_listen_yet_is_waited_for_then_named():
    http = FakeHttp(lambda text, last: "gpu1")
    answers_left = iter([(None, "URLError: [Errno 111] Connection refused")] * 3)
    plain_get = http.get

    def get(url, timeout):
        if url == f"{ROUTER}/readiness":
            return next(answers_left, (200, ""))
        return plain_get(url, timeout)

    http.get = get
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.status == "pass"  # listening 1.5 s later: waited for
    http = FakeHttp(lambda text, last: "gpu1")
    http.get = lambda url, timeout: (None, "URLError: [Errno 111] Connection refused")
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.message == (
        "Qwen/Qwen3-32B via ceph1:8100: the router does not answer on http://10.213.9.11:8100 "
        "after 6 s: URLError: [Errno 111] Connection refused (systemctl status "
        "kvceph-router@8100.service on ceph1)"
    )


def test_an_engine_whose_metrics_cannot_be_read_is_named():
    http = FakeHttp(lambda text, last: "gpu1")
    plain_get = http.get
    http.get = lambda url, timeout: (
        (401, "Unauthorized") if url == "http://gpu2:8000/metrics" else plain_get(url, timeout)
    )
    (step,) = run_step(http, router_only=True).steps
    assert step.verdict.status == "fail"
    assert step.verdict.message == (
        "Qwen/Qwen3-32B via ceph1:8100: gpu2 http://gpu2:8000/metrics: HTTP 401"
    )


def test_a_document_lmcache_stored_is_said_to_stay_in_the_bucket():
    small = [(url, targets.Target(**{**vars(t), "chunk_size": 16})) for url, t in ROUTE.workers]
    route = routed.Route(**{**vars(ROUTE), "workers": tuple(small)})
    http = FakeHttp(lambda text, last: "gpu1")
    (step,) = run_step(http, route, router_only=True).steps
    assert step.verdict.status == "pass"
    assert "LMCache stored the routed document (4 objects, left in the bucket" in (
        step.verdict.message
    )
