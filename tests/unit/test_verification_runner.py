"""The whole cycle offline: fake OpenAI engines on 127.0.0.1 sharing an in-memory bucket.

The fake engine does what the chain does, in miniature: one token per word (its /tokenize
says which), LMCache's chunk names (object_names.py, seeded per engine, to model a
PYTHONHASHSEED mismatch), one object per chunk and TP worker written after the prefill, a
lookup that loads consecutive chunks from the bucket, and vLLM's metric names.
"""

import hashlib
import json
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploys.verification import object_names, runner, targets, transport
from deploys.verification import report as reporting
from deploys.verification.bookkeeping import ObjectInfo

MODEL = "Qwen/Qwen3-32B"
CHUNK = 256


class FakeBucket:
    endpoint = "memory://bucket"

    def __init__(self):
        self.objects: dict[str, ObjectInfo] = {}
        self.lock = threading.Lock()
        self.check_error = None
        self.deleted: list[str] = []

    def put(self, key, size):
        with self.lock:
            self.objects[key] = ObjectInfo(key, size, datetime.now(UTC))

    def check(self):
        return self.check_error

    def list(self, prefix):
        with self.lock:
            return {k: o for k, o in self.objects.items() if k.startswith(prefix)}

    def find(self, names):
        """Like Boto3Bucket.find: one object listed under each name's stem."""
        self.finds = getattr(self, "finds", 0) + len(names)
        out = {}
        with self.lock:
            for name in names:
                stem = object_names.stem(name)
                under = sorted(k for k in self.objects if k.startswith(stem))
                if under:
                    out[name] = self.objects[under[0]]
        return out

    def delete(self, keys):
        with self.lock:
            for k in keys:
                self.objects.pop(k, None)
                self.deleted.append(k)
        return len(keys)


def token_ids(words):
    """The fake tokenizer: one id per word."""
    return [int.from_bytes(hashlib.sha256(w.encode()).digest()[:3], "big") for w in words]


class FakeEngine:
    def __init__(self, bucket, tp=2, salt="67", model=MODEL, ms_per_token=0.2, ms_per_chunk=0.2):
        self.bucket, self.tp, self.salt, self.model = bucket, tp, salt, model
        self.ms_per_token, self.ms_per_chunk = ms_per_token, ms_per_chunk
        self.writes_ok = True
        self.loads_ok = True  # False: LMCache gave up every load (its journal says why)
        self.journal: set[str] = set()
        self.health = 200
        self.stream_error = None
        self.foreign_writes = 0
        self.min_hit = 0  # kvceph's connector: hits below it are reported as 0
        self.skip_short = False  # kvceph.skip_short_puts: no PUT when S3 was asked < min_hit
        self.local_cpu = False  # LMCache's DRAM tier: chunks this process stored or loaded
        self.honours_salt = True  # vLLM >= 0.9: cache_salt joins its prefix cache's hash
        self.lmcache_metrics = False  # LMCache's counters on /metrics (PROMETHEUS_MULTIPROC_DIR)
        # A wrong load (LMCache #4463, an altered body): an answer from KV loaded from S3
        # differs from this position on; None: every load is right.
        self.wrong_from: int | None = None
        self.token_ids = True  # returns logprobs' token_id:<id> names as vLLM does
        self.loaded_s3 = 0  # chunks the last request loaded from S3
        self.restart()

    def restart(self):
        self.hits = 0.0
        self.computed = 0.0
        self.gpu_hits = 0.0
        self.remote_read = 0.0
        self.gpu: set = set()  # vLLM's prefix cache: (salt, prompt) it computed
        self.dram: set[str] = set()

    def keys(self, words):
        """LMCache's object names, one list (a name per TP worker) per full chunk."""
        names = object_names.names(
            token_ids(words), model=self.model, world_size=self.tp, chunk_size=CHUNK,
            save_unfull_chunk=False, algorithm="sha256_cbor", seed=self.salt,
        )  # fmt: skip
        return [names[i : i + self.tp] for i in range(0, len(names), self.tp)]

    def prefill(self, words, salt=None):
        """Returns seconds to the first token; loads/stores like LMCache (full chunks only);
        vLLM's prefix cache answers a prompt it computed under the same salt first."""
        seen = (salt if self.honours_salt else None, tuple(words))
        if seen in self.gpu:
            self.loaded_s3 = 0  # the KV an earlier request held (right unless loaded wrong)
            self.gpu_hits += len(words) - 1
            self.computed += 1
            return self.ms_per_token / 1000
        self.gpu.add(seen)
        chunks = self.keys(words)
        present = self.bucket.list("")
        hit = dram = 0
        for keys in chunks:
            if self.loads_ok and all(k in self.dram for k in keys) and hit == dram:
                hit, dram = hit + 1, dram + 1
                continue
            if not self.loads_ok or not all(k in present for k in keys):
                break
            hit += 1
        if (hit - dram) * CHUNK < self.min_hit:
            hit = dram
        loaded = hit * CHUNK - (1 if hit * CHUNK == len(words) else 0)
        self.hits += loaded
        self.computed += len(words) - loaded
        self.remote_read += (hit - dram) * self.tp * CHUNK * 64
        self.loaded_s3 = hit - dram
        if self.local_cpu:
            self.dram.update(k for keys in chunks for k in keys)
        short = self.skip_short and (len(chunks) - dram) * CHUNK < self.min_hit
        if self.writes_ok and not short:
            for keys in chunks[hit:]:
                for k in keys:
                    self.bucket.put(k, CHUNK * 64)
            for i in range(self.foreign_writes):
                self.bucket.put(f"{self.model.replace('/', '_')}@{self.tp}@0@f{i:015x}@bfloat16", 1)
        took = (len(words) - loaded) * self.ms_per_token + (hit - dram) * self.ms_per_chunk
        return (took + dram * self.ms_per_chunk / 10) / 1000

    def answer(self, words, n):
        """The greedy answer's ids: a function of the prompt, unless the KV loaded is wrong."""
        ids = token_ids([f"{w}/{i}" for i, w in zip(range(n), words * n, strict=False)])
        if self.wrong_from is not None and self.loaded_s3:
            ids[self.wrong_from :] = [t + 1 for t in ids[self.wrong_from :]]
        return ids

    def metrics(self):
        base = f'model_name="{self.model}",engine="0"'
        src = "vllm:prompt_tokens_by_source_total"
        return (
            f'{src}{{{base},source="external_kv_transfer"}} {self.hits}\n'
            f'{src}{{{base},source="local_compute"}} {self.computed}\n'
            f"vllm:prefix_cache_hits_total{{{base}}} {self.gpu_hits}\n"
        ) + (
            f'lmcache:num_remote_read_bytes_total{{worker_id="0"}} {self.remote_read}\n'
            if self.lmcache_metrics
            else ""
        )


def _handler(engine):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, status, body, ctype="application/json"):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            if self.path == "/health":
                self._send(engine.health, "")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"data": [{"id": engine.model, "owned_by": "vllm"}]}))
            elif self.path == "/metrics":
                self._send(200, engine.metrics(), "text/plain")
            else:
                self._send(404, "{}")

        def do_POST(self):  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if req["model"] != engine.model:
                return self._send(404, json.dumps({"error": {"message": "model not found"}}))
            words = " ".join(m["content"] for m in req["messages"]).split()
            if self.path == "/tokenize":
                ids = token_ids(words)
                return self._send(200, json.dumps({"count": len(ids), "tokens": ids}))
            if not req.get("stream"):
                body = {"choices": [{"message": {"content": "OK"}}], "usage": {"prompt_tokens": 3}}
                return self._send(200, json.dumps(body))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def event(obj):
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.flush()

            event({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
            time.sleep(engine.prefill(words, req.get("cache_salt")))
            if engine.stream_error:
                event({"error": {"message": engine.stream_error, "code": 500}})
                return
            event({"choices": [{"delta": {"reasoning_content": "hmm"}}]})
            n = req["max_tokens"]
            as_ids = req.get("logprobs") and req.get("return_tokens_as_token_ids")
            for i, t in enumerate(engine.answer(words, n)):
                # vLLM's chunk with logprobs and return_tokens_as_token_ids (0.25.1 and 0.34)
                lp = {"content": [{"token": f"token_id:{t}", "logprob": -0.01,
                                   "bytes": [111, 107], "top_logprobs": []}]}  # fmt: skip
                choice = {"index": 0, "delta": {"content": "ok"}, "finish_reason": None}
                choice["logprobs"] = lp if as_ids and engine.token_ids else None
                if i == n - 1:
                    choice["finish_reason"] = "length"
                event({"choices": [choice]})
            event({"choices": [], "usage": {"prompt_tokens": len(words), "completion_tokens": n}})
            self.wfile.write(b"data: [DONE]\n\n")

    return H


class FakeControl:
    def __init__(self, engines):
        self.engines = engines
        self.restarts: list[str] = []
        self.on_restart = None

    def restart(self, host, timeout):
        self.restarts.append(host)
        self.engines[host].restart()
        if self.on_restart:
            self.on_restart(host, self.restarts.count(host))
        return None

    def remote_tier(self, host):
        return self.engines[host].journal

    def journal_has(self, host, since, text):
        if text == runner.S3_DISABLED:
            return not self.engines[host].writes_ok
        return any(text in line for line in self.engines[host].journal)


@pytest.fixture
def lab():
    bucket = FakeBucket()
    engines, servers = {}, []

    def add(name, **kw):
        engine = FakeEngine(bucket, **kw)
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(engine))
        threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
        servers.append(srv)
        engines[name] = engine
        return targets.Target(
            name=name,
            base_url=f"http://127.0.0.1:{srv.server_address[1]}",
            model=MODEL,
            tensor_parallel_size=engine.tp,
            chunk_size=CHUNK,
            save_unfull_chunk=False,
            health_timeout=2,
            max_model_len=40960,
            hash_seed=67,
        )

    yield bucket, engines, add
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _run(bucket, engines, groups, control=None, canaries=(), **opts):
    options = targets.Options(
        document_tokens=1030, objects_timeout=0.2, poll_interval=0.01, request_timeout=10, **opts
    )
    control = control or FakeControl(engines)
    r = runner.Runner(options, bucket, control, log=lambda _m: None)
    return r.run(groups, canaries=canaries), control


def _by_step(rep):
    return {(s.host, s.step): s for s in rep.steps}


def test_healthy_chain_passes_and_touches_only_its_objects(lab, tmp_path):
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    g = add("gaudi1", tp=1)
    # Someone else's chunks under the same prefix, written earlier: must survive.
    foreign = [f"Qwen_Qwen3-32B@2@{w}@{i:016x}@bfloat16" for w in (0, 1) for i in range(3)]
    for k in foreign:
        bucket.objects[k] = ObjectInfo(k, 1, datetime(2026, 1, 1, tzinfo=UTC))
    rep, control = _run(bucket, engines, [[a, b], [g]])
    steps = _by_step(rep)
    assert not rep.failures, rep.failure_lines()
    cold = steps[("gpu1", "cold")]
    assert cold.objects == 8 and cold.verdict.status == "pass"  # 1030 // 256 x TP 2
    assert steps[("gpu1", "warm")].hit_tokens == 1024
    assert steps[("gpu1", "warm")].verdict.status == "pass"
    assert steps[("gpu1", "warm")].ttft < cold.ttft
    assert steps[("gpu2", "cross-node")].hit_tokens == 1024
    assert steps[("gpu1", "fallback")].verdict.status == "pass"
    assert steps[("gpu1", "cleanup")].objects == 8
    assert steps[("gaudi1", "cross-node")].verdict.message.startswith("skipped: one host")
    assert steps[("gaudi1", "cold")].objects == 4
    assert control.restarts == ["gpu1", "gpu1", "gaudi1", "gaudi1"]
    # Deleted: this run's keys only (twice for gpu1: fallback and cleanup), never foreign ones.
    assert not set(bucket.deleted) & set(foreign)
    assert set(bucket.objects) == set(foreign)
    table = reporting.table(rep)
    assert "gpu2" in table and "cross-node" in table
    path = reporting.write_json(rep, tmp_path)
    data = json.loads(path.read_text())
    assert data["passed"] and data["run_id"] == rep.run_id
    assert data["groups"] == [["gpu1", "gpu2"], ["gaudi1"]]
    assert data["engines"] == {"gpu1": "vllm", "gpu2": "vllm", "gaudi1": "vllm"}
    assert reporting.simulated_note(rep) is None  # vLLM answered: nothing simulated
    assert (tmp_path / "verify-latest.json").exists()
    png, notice = reporting.write_png(rep, tmp_path)
    assert png or "matplotlib" in notice


def test_s3_unreachable_fails_every_cache_step(lab):
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    engines["gpu1"].writes_ok = False
    rep, _ = _run(bucket, engines, [[a, b]])
    steps = _by_step(rep)
    cold = steps[("gpu1", "cold")].verdict
    assert cold.failed and "no objects written" in cold.message
    assert "S3 connection disabled" in cold.message
    assert "cannot reach RGW" in steps[("gpu1", "warm")].verdict.message
    assert steps[("gpu2", "cross-node")].verdict.failed
    fb = steps[("gpu1", "fallback")].verdict
    assert fb.failed and "created no objects" in fb.message
    assert not bucket.deleted


def test_cross_node_miss_from_a_different_hash_seed(lab):
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2", salt="68")
    rep, _ = _run(bucket, engines, [[a, b]])
    steps = _by_step(rep)
    assert steps[("gpu1", "warm")].figures["answer"]["equal"]  # its TTFT: the fake's timing
    cross = steps[("gpu2", "cross-node")].verdict
    assert cross.failed and "no cross-node hit on the chunks gpu1 wrote" in cross.message
    assert [f.step for f in rep.failures] == ["cross-node"]


def test_lmcache_log_lines_name_the_cause_of_a_missed_warm_load(lab):
    # What an undersized lmcache.yaml did on an H200: chunks written, never loaded back.
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    control = FakeControl(engines)

    def give_up(host, n):
        engine = engines[host]
        engine.loads_ok = False
        engine.journal = {
            "LMCache WARNING: Failed to allocate memory block of size 67108864 because no "
            "memory is available",
            "LMCache WARNING: Request cmpl-1 is still waiting for async lookup after 3 seconds, "
            "returning 0 lmcache cached tokens so vllm can recompute",
        }

    control.on_restart = give_up
    engines["gpu2"].loads_ok = False
    engines["gpu2"].journal = {"Request cmpl-2 is still waiting for async lookup after 0 seconds"}
    rep, _ = _run(bucket, engines, [[a, b]], control=control)
    steps = _by_step(rep)
    warm = steps[("gpu1", "warm")].verdict
    assert warm.failed and "no tokens loaded from the cache" in warm.message
    assert (
        "'Failed to allocate memory block'" in warm.message and "max_local_cpu_size" in warm.message
    )
    assert "'is still waiting for async lookup'" in warm.message
    assert "lookup_timeout_ms" in warm.message and "chunk-size mismatch" not in warm.message
    cross = steps[("gpu2", "cross-node")].verdict
    assert cross.failed and "lookup_timeout_ms" in cross.message
    assert "max_local_cpu_size" not in cross.message


def test_no_speedup_is_reported_as_a_warning(lab):
    bucket, engines, add = lab
    a = add("gpu1", ms_per_token=0.01, ms_per_chunk=20)
    rep, _ = _run(bucket, engines, [[a]])
    warm = _by_step(rep)[("gpu1", "warm")].verdict
    assert warm.status == "warn" and "slower than recompute" in warm.message
    assert not rep.failures


def test_fallback_request_failing_mid_stream(lab):
    bucket, engines, add = lab
    a = add("gpu1")
    control = FakeControl(engines)

    def break_second_restart(host, count):
        if count == 2:
            engines[host].stream_error = "KV load failed for tokens 0-256"

    control.on_restart = break_second_restart
    rep, _ = _run(bucket, engines, [[a]], control=control)
    fb = _by_step(rep)[("gpu1", "fallback")].verdict
    assert fb.failed and "KV load failed" in fb.message and "recompute" in fb.message


def test_other_traffic_under_the_model_prefix_is_neither_counted_nor_deleted(lab):
    # A live fleet: other requests write under the same model@TP@ prefix during the run.
    bucket, engines, add = lab
    a = add("gpu1")
    engines["gpu1"].foreign_writes = 3
    listed = []
    real_list = bucket.list
    bucket.list = lambda prefix: listed.append(prefix) or real_list(prefix)
    rep, _ = _run(bucket, engines, [[a]])
    steps = _by_step(rep)
    assert not rep.failures, rep.failure_lines()
    assert steps[("gpu1", "cold")].objects == 8
    assert steps[("gpu1", "fallback")].objects == 8
    assert steps[("gpu1", "cleanup")].objects == 8
    foreign = {k for k in bucket.objects if "@f0000" in k}
    assert len(foreign) == 3 and not foreign & set(bucket.deleted)
    assert set(bucket.objects) == foreign
    # The runner never lists a prefix (the fake engine's own lookups list "").
    assert set(listed) == {""}


def test_builtin_hash_fails_the_cold_step_naming_the_setting_and_the_fix(lab):
    bucket, engines, add = lab
    a = targets.Target(**{**add("gpu1").__dict__, "hash_algorithm": "builtin"})
    rep, control = _run(bucket, engines, [[a]])
    assert rep.failure_lines() == [
        "gpu1: cold: pre_caching_hash_algorithm builtin (kvceph_lmcache_hash_algorithm) keys "
        "chunks with Python's hash() in the engine's process: verify cannot name the run's "
        "objects; fix: kvceph_lmcache_hash_algorithm: sha256_cbor in group_data, then deploy.py"
    ]
    assert control.restarts == [] and bucket.objects == {}


def test_a_seed_the_settings_do_not_know_finds_no_object_and_deletes_nothing(lab):
    # The engine runs another PYTHONHASHSEED than the settings say: its names are not the run's.
    bucket, engines, add = lab
    a = add("gpu1", salt="68")
    rep, _ = _run(bucket, engines, [[a]])
    steps = _by_step(rep)
    cold = steps[("gpu1", "cold")].verdict
    assert cold.failed and "none of the 8 names found" in cold.message
    assert "PYTHONHASHSEED" in cold.message
    assert bucket.deleted == [] and len(bucket.objects) == 8


def test_preflight_failures_skip_the_cycle_loudly(lab):
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    engines["gpu1"].model = "other/model"
    engines["gpu2"].health = 503
    rep, control = _run(bucket, engines, [[a, b]])
    steps = _by_step(rep)
    assert "not the configured 'Qwen/Qwen3-32B'" in steps[("gpu1", "preflight")].verdict.message
    assert "503: the engine died" in steps[("gpu2", "preflight")].verdict.message
    assert steps[("gpu1", "cold")].verdict.message == "skipped: preflight failed"
    assert control.restarts == []


def test_unreachable_engine_and_s3_check(lab):
    bucket, engines, add = lab
    a = add("gpu1")
    dead = targets.Target("gpu9", "http://127.0.0.1:9", MODEL, 2, CHUNK, False, 0.3, 40960)
    bucket.check_error = "S3 http://10.213.7.11:80 bucket lmcache: HTTP 403: credentials rejected"
    rep, _ = _run(bucket, engines, [[a, dead]])
    steps = _by_step(rep)
    assert "/health not 200 within 0.3s" in steps[("gpu9", "preflight")].verdict.message
    assert "HTTP 403" in steps[("controller", "s3")].verdict.message
    assert steps[("gpu1", "cold")].verdict.message == "skipped: the S3 endpoint check failed"


def test_document_too_long_for_the_model(lab):
    bucket, engines, add = lab
    a = add("gpu1")
    short = targets.Target(**{**a.__dict__, "max_model_len": 512})
    rep, _ = _run(bucket, engines, [[short]])
    assert "does not fit max_model_len 512" in rep.failure_lines()[0]


def test_fallback_restart_failure_is_not_blamed_on_recompute(lab):
    bucket, engines, add = lab
    a = add("gpu1")

    class Control(FakeControl):
        def restart(self, host, timeout):
            super().restart(host, timeout)
            return "Job for vllm.service failed" if self.restarts.count(host) == 2 else None

    rep, _ = _run(bucket, engines, [[a]], control=Control(engines))
    fb = _by_step(rep)[("gpu1", "fallback")].verdict
    assert fb.failed
    assert fb.message == (
        "fallback not tested: 8 deleted, but restart failed: Job for vllm.service failed"
    )


def test_bucket_failure_between_steps_aborts_the_group_with_a_line(lab):
    bucket, engines, add = lab
    a = add("gpu1")
    calls = {"n": 0}
    real_find = bucket.find

    def flaky(names):
        calls["n"] += 1
        if calls["n"] > 1:  # the cold step's lookup works, the fallback's fails
            raise transport.CheckFailed("S3 memory://bucket: find 8 objects: connection reset")
        return real_find(names)

    bucket.find = flaky
    rep, _ = _run(bucket, engines, [[a]])
    assert rep.failure_lines() == [
        "gpu1: aborted: cycle aborted: S3 memory://bucket: find 8 objects: connection reset"
    ]


def test_boto3_bucket_unreachable_endpoint_is_named():
    creds = type("C", (), {})()
    creds.access_key = creds.secret_key = type("S", (str,), {"reveal": lambda self: "x"})("x")
    b = transport.Boto3Bucket("http://127.0.0.1:9", "lmcache", "default", creds, 1, 1000)
    assert b.check().startswith("S3 http://127.0.0.1:9 unreachable")
    with pytest.raises(transport.CheckFailed, match=r"S3 http://127.0.0.1:9 bucket lmcache: list"):
        b.list("Qwen_Qwen3-32B@2@")
    with pytest.raises(transport.CheckFailed, match=r"bucket lmcache: find 1 objects by name"):
        b.find(["Qwen_Qwen3-32B@2@0@ab@bfloat16"])


def test_boto3_bucket_finds_each_name_by_an_exact_listing_not_head(monkeypatch):
    # The bucket's owner gets 403 on a HEAD of an engine user's object (issue 36): a listing
    # under the name's stem finds it, one name per call, at most one key back.
    from botocore.stub import Stubber

    monkeypatch.setattr(transport, "FIND_CONCURRENCY", 1)  # the stub answers in order

    creds = type("C", (), {})()
    creds.access_key = creds.secret_key = type("S", (str,), {"reveal": lambda self: "x"})("x")
    b = transport.Boto3Bucket("http://127.0.0.1:9", "lmcache", "default", creds, 1, 1000)
    names = ["Qwen_Qwen3-32B@2@0@ab@bfloat16", "Qwen_Qwen3-32B@2@1@ab@bfloat16"]
    when = datetime(2026, 12, 4, tzinfo=UTC)
    with Stubber(b._client) as stub:
        stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": names[0], "Size": 7, "LastModified": when}], "KeyCount": 1},
            {"Bucket": "lmcache", "Prefix": "Qwen_Qwen3-32B@2@0@ab@", "MaxKeys": 1},
        )
        stub.add_response(
            "list_objects_v2",
            {"KeyCount": 0},
            {"Bucket": "lmcache", "Prefix": "Qwen_Qwen3-32B@2@1@ab@", "MaxKeys": 1},
        )
        found = b.find(names)
        stub.assert_no_pending_responses()
    assert found == {names[0]: ObjectInfo(names[0], 7, when)}


def test_two_engines_of_a_host_and_another_host_all_load_the_writers_chunks(lab):
    bucket, engines, add = lab
    a, b, c = add("gpu1/engine-a"), add("gpu1/engine-b"), add("gpu2")
    assert (a.host, b.host) == ("gpu1", "gpu1")
    rep, control = _run(bucket, engines, [[a, b, c]])
    steps = _by_step(rep)
    assert not rep.failures, rep.failure_lines()
    # Reuse inside the host and across hosts, each proved by its own step.
    assert steps[("gpu1/engine-b", "cross-engine")].hit_tokens == 1024
    assert steps[("gpu2", "cross-node")].hit_tokens == 1024
    assert control.restarts == ["gpu1/engine-a", "gpu1/engine-a"]


def test_a_peer_engine_on_the_same_host_that_misses_fails_its_own_step(lab):
    bucket, engines, add = lab
    a, b, c = add("gpu1/engine-a"), add("gpu1/engine-b", salt="68"), add("gpu2")
    rep, _ = _run(bucket, engines, [[a, b, c]])
    steps = _by_step(rep)
    assert steps[("gpu1/engine-b", "cross-engine")].verdict.status == "fail"
    assert steps[("gpu2", "cross-node")].verdict.status == "pass"


def test_peers_are_one_engine_of_the_host_and_one_of_another_host():
    def t(name):
        return targets.Target(name, "http://x", MODEL, 2, CHUNK, False, 2, 40960)

    a, b, c, d = t("gpu1/a"), t("gpu1/b"), t("gpu2/a"), t("gpu2/b")
    assert targets.peers_of(a, [a, b, c, d]) == [b, c]
    assert targets.peers_of(c, [c, d]) == [d]
    assert targets.peers_of(t("gpu3"), [t("gpu3"), c]) == [c]


# --- The remote tier and the crossover (kvceph's connector) ------------------------------------

NO_TIER = (
    "ERROR x [kvceph_lab_engine.lmcache] Failed to load remote connector kvceph due to "
    "import/attribute error: No module named 'kvceph_connector'",
    "WARNING x [kvceph_lab_engine.lmcache] Failed to initialize/re-establish remote connection: "
    "No adapter found for URL: plugin://kvceph",
    "INFO x [kvceph_lab_engine.lmcache] Created remote backend for plugin: kvceph",
)


def test_an_engine_without_remote_tier_fails_preflight_naming_the_cause(lab):
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    engines["gpu2"].journal = list(NO_TIER)
    rep, _ = _run(bucket, engines, [[a, b]])
    pre = _by_step(rep)[("gpu2", "preflight")].verdict
    assert pre.failed and "serves with no remote tier" in pre.message
    assert "No adapter found for URL: plugin://kvceph" in pre.message
    assert _by_step(rep)[("gpu1", "preflight")].verdict.status == "pass"


def _kvceph(target, min_hit):
    return targets.Target(
        **{**target.__dict__, "connector": "kvceph", "min_hit_tokens": min_hit,
           "crossover": f"{min_hit} tokens (test)"}
    )  # fmt: skip


def test_below_the_crossover_no_hit_is_the_pass_and_nothing_is_measured(lab):
    bucket, engines, add = lab
    a, b = _kvceph(add("gpu1"), 2048), _kvceph(add("gpu2"), 2048)
    for e in engines.values():
        e.min_hit = 2048
    options = targets.Options(
        document_tokens=1030, objects_timeout=0.2, poll_interval=0.01, request_timeout=10
    )
    r = runner.Runner(options, bucket, FakeControl(engines), log=lambda _m: None)
    rep = r.run([[a, b]])
    steps = _by_step(rep)
    warm = steps[("gpu1", "warm")]
    assert warm.verdict.status == "pass" and "below the crossover 2048" in warm.verdict.message
    assert steps[("gpu2", "cross-node")].verdict.status == "pass"
    assert warm.figures["min_hit_tokens"] == 2048
    assert r.measured == []


def test_skip_short_puts_below_the_crossover_writes_nothing_and_that_passes(lab):
    bucket, engines, add = lab
    a, b = (
        targets.Target(**{**_kvceph(add(n), 2048).__dict__, "skip_short_puts": True})
        for n in ("gpu1", "gpu2")
    )
    for e in engines.values():
        e.min_hit, e.skip_short = 2048, True
    rep, _ = _run(bucket, engines, [[a, b]])
    steps = _by_step(rep)
    assert not rep.failures, rep.failure_lines()
    cold = steps[("gpu1", "cold")]
    assert cold.objects == 0 and "below the crossover 2048" in cold.verdict.message
    assert steps[("gpu1", "fallback")].verdict.message.startswith("skipped: kvceph_skip_short")
    assert bucket.objects == {}
    # An engine whose connector stores them anyway (an older kvceph-connector) fails the step.
    engines["gpu1"].skip_short = False
    rep, _ = _run(bucket, engines, [[a]])
    cold = _by_step(rep)[("gpu1", "cold")].verdict
    assert cold.failed and "does not skip them" in cold.message


def test_a_hit_below_the_crossover_fails(lab):
    bucket, engines, add = lab
    a = _kvceph(add("gpu1"), 2048)  # the engine ignores it (an old connector)
    rep, _ = _run(bucket, engines, [[a]])
    warm = _by_step(rep)[("gpu1", "warm")].verdict
    assert warm.failed and "must report 0 hits below kvceph.min_hit_tokens" in warm.message


def test_a_complete_warm_load_is_measured(lab):
    bucket, engines, add = lab
    a = add("gpu1")
    options = targets.Options(
        document_tokens=1030, objects_timeout=0.2, poll_interval=0.01, request_timeout=10
    )
    r = runner.Runner(options, bucket, FakeControl(engines), log=lambda _m: None)
    rep = r.run([[a]])
    ((writer, figures),) = r.measured
    steps = _by_step(rep)
    assert (
        writer.name == "gpu1"
        and figures["prompt_tokens"] == steps[("gpu1", "cold")].figures["prompt_tokens"]
    )
    assert figures["cold_ttft_s"] == steps[("gpu1", "cold")].ttft
    assert figures["warm_ttft_s"] == steps[("gpu1", "warm")].ttft
    assert figures["kv_bytes"] == steps[("gpu1", "cold")].figures["kv_bytes"] > 0


# --- the answer check (issue 50 item 1) -------------------------------------------------------


def test_every_step_asks_a_greedy_answer_and_an_honest_chain_repeats_it(lab, tmp_path):
    bucket, engines, add = lab
    rep, _ = _run(bucket, engines, [[add("gpu1"), add("gpu2")]], output_tokens=8)
    assert not rep.failures, rep.failure_lines()
    steps = _by_step(rep)
    assert steps[("gpu1", "cold")].figures["answer_tokens"] == 16  # 8 raised to 16
    for host, step in (("gpu1", "warm"), ("gpu2", "cross-node"), ("gpu1", "fallback")):
        answer = steps[(host, step)].figures["answer"]
        assert answer["equal"] and answer["first_difference"] is None and answer["host"] == host


def test_a_wrong_load_fails_warm_and_cross_node_naming_tier_host_and_position(lab, tmp_path):
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    engines["gpu1"].wrong_from = engines["gpu2"].wrong_from = 5  # LMCache #4463's packed layout
    r = runner.Runner(
        targets.Options(document_tokens=1030, objects_timeout=0.2, poll_interval=0.01,
                        request_timeout=10),
        bucket, FakeControl(engines), log=lambda _m: None,
    )  # fmt: skip
    rep = r.run([[a, b]])
    steps = _by_step(rep)
    warm, cross = steps[("gpu1", "warm")], steps[("gpu2", "cross-node")]
    assert warm.hit_tokens == 1024  # a full, fast hit: only the answer shows the fault
    assert warm.verdict.status == cross.verdict.status == "fail"
    assert warm.verdict.message.startswith(
        "wrong answer from S3 after restart on gpu1: first differing token at position 5 of 32"
    )
    assert "LMCache #4463" in warm.verdict.message
    assert cross.verdict.message.startswith(
        "wrong answer from S3, another node on gpu2: first differing token at position 5 of 32"
    )
    assert steps[("gpu1", "fallback")].verdict.status == "pass"  # recomputed: right again
    assert r.measured == []  # a wrong load measures nothing
    data = reporting.to_dict(rep)
    assert not data["passed"]
    got = {(s["host"], s["step"]): s for s in data["steps"]}
    answer = got[("gpu1", "warm")]["figures"]["answer"]
    assert answer["tier"] == "S3 after restart" and answer["host"] == "gpu1"
    assert answer["first_difference"] == 5 and answer["cold_token"] + 1 == answer["token"]
    assert reporting.write_json(rep, tmp_path).exists()


def test_a_wrong_answer_from_dram_fails_the_dram_step(lab):
    bucket, engines, add = lab
    a = targets.Target(**{**add("gpu1").__dict__, "local_cpu": True})
    engines["gpu1"].local_cpu = True
    rep, _ = _run(bucket, engines, [[a]])
    assert _by_step(rep)[("gpu1", "dram")].figures["answer"]["equal"]
    bucket2, engines2 = FakeBucket(), {}
    e = FakeEngine(bucket2)
    e.local_cpu, e.wrong_from = True, 0
    real = e.answer

    def dram_wrong(words, n):  # the DRAM tier's copy is the wrong one (the 2nd request)
        ids = real(words, n)
        return [t + 1 for t in ids] if e.dram and not e.loaded_s3 and e.hits else ids

    e.answer = dram_wrong
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(e))
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    try:
        engines2["gpu1"] = e
        t = targets.Target(
            **{**a.__dict__, "base_url": f"http://127.0.0.1:{srv.server_address[1]}"}
        )
        rep, _ = _run(bucket2, engines2, [[t]])
    finally:
        srv.shutdown()
        srv.server_close()
    dram = _by_step(rep)[("gpu1", "dram")]
    assert dram.verdict.status == "fail"
    assert dram.verdict.message.startswith(
        "wrong answer from node DRAM on gpu1: first differing token at position 0"
    )


def test_an_engine_that_returns_no_token_ids_fails_cold(lab):
    bucket, engines, add = lab
    a = add("gpu1")
    engines["gpu1"].token_ids = False
    steps = _by_step(_run(bucket, engines, [[a]])[0])
    cold = steps[("gpu1", "cold")]
    assert cold.verdict.status == "fail" and "carried no token ids" in cold.verdict.message
    assert "answer" not in steps[("gpu1", "warm")].figures  # nothing to compare with


def test_bodies_refused_on_their_crc32c_are_misses_and_the_run_passes(lab):
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    control = FakeControl(engines)
    line = (
        "kvceph: crc32c since start: refused 2 GET bodies of 8 checked at http://rgw (each a "
        "miss: not handed over), last k: crc32c 1 != stored 2"
    )

    refused: set[str] = set()  # the third chunk's objects: refused on every engine

    def corrupt(host, n):
        if n == 1:  # before the warm request; a refused body is a miss (fake: gone)
            for e in engines.values():
                e.journal.add(line)
            for k in refused:
                bucket.objects.pop(k, None)

    control.on_restart = corrupt
    original = engines["gpu1"].prefill

    def remember(words, salt=None):
        if not refused:
            refused.update(engines["gpu1"].keys(words)[2])
        return original(words, salt)

    engines["gpu1"].prefill = remember
    rep, _ = _run(bucket, engines, [[a, b]], control=control)
    assert not rep.failures, rep.failure_lines()
    steps = _by_step(rep)
    warm = steps[("gpu1", "warm")]
    assert warm.verdict.status == "warn" and warm.hit_tokens == 512, warm.verdict.message
    assert warm.verdict.message.startswith("512 of 1024 tokens loaded")
    assert "refused GET bodies whose crc32c differs" in warm.verdict.message
    assert warm.figures["answer"]["equal"]
    # (the fake rewrote what it recomputed, so gpu2 found every chunk again)
    assert steps[("gpu2", "cross-node")].figures["answer"]["equal"]


def _prove():
    """hw/h200/prove.py, the H200's runner (imported as its own script does)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "hw" / "h200" / "prove.py"
    spec = importlib.util.spec_from_file_location("h200_prove", path)
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:  # its script paths (hw/h200 first) stay out of the other tests' imports
        sys.path[:] = saved
        sys.modules.pop("local", None)
    return module


def test_the_h200s_pair_runner_catches_a_wrong_cross_node_load(lab, monkeypatch):
    # prove.py's PairRunner against vLLM-shaped engines (the chat stream with logprobs and
    # return_tokens_as_token_ids as vLLM 0.25.1 and 0.34 send it): the reader loads wrong KV.
    prove = _prove()
    monkeypatch.setattr(prove.time, "sleep", lambda _s: None)
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    engines["gpu2"].wrong_from = 17
    options = targets.Options(
        document_tokens=1030, objects_timeout=0.2, poll_interval=0.01, request_timeout=10
    )
    r = prove.PairRunner(options, bucket, FakeControl(engines), log=lambda _m: None)
    steps = _by_step(r.run([[a, b]]))
    assert steps[("gpu1", "warm")].figures["answer"]["equal"]  # its TTFT: the fake's timing
    cross = steps[("gpu2", "cross-node")]
    assert cross.verdict.status == "fail" and cross.hit_tokens == 1024
    assert cross.verdict.message.startswith(
        "wrong answer from S3, another node on gpu2: first differing token at position 17 of 32"
    )
    assert r.rewrites["writer_objects"] == 8


def test_a_failed_cold_step_skips_the_cross_step_of_every_peer(lab):
    """A failed cold request skipped the rest by handing the peer list to a helper that took
    one target: an AttributeError instead of a report."""
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    engines["gpu1"].stream_error = "engine died"
    rep, _ = _run(bucket, engines, [[a, b]])
    steps = _by_step(rep)
    assert steps[("gpu1", "cold")].verdict.status == "fail"
    cross = steps[("gpu2", "cross-node")].verdict
    assert cross.status == "skip" and "the cold request failed" in cross.message
