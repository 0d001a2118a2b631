"""The cache-aware router on ceph1 (inventory group ``router``, docs/router.md): a hardened unit
serving the lab's model on :8100 with every engine a worker; no route open without the
engines' key; a repeat lands on the engine that holds its prefix (a GPU-tier hit, not a
recompute), and verify.py's router step proves it; an engine that stops leaves the pool
within the health bound and returns after readiness, and no request through the router fails
meanwhile; a rolling restart of every engine under a steady stream through the router cuts and
refuses none of it."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

from conftest import HOSTS, INFERENCE, REPO, REPORTS, pyinfra, restore_needed, ssh
from lab_client import StreamLoad, api_key, auth_headers, long_prompt, metric, wait_health

ROUTER = f"http://{HOSTS['ceph1']}:8100"
UNIT = "kvceph-router@8100.service"
MODEL = "Qwen/Qwen3-32B"


def call(path: str, body: dict | None = None, headers=None, timeout: float = 60):
    """(status, parsed body or text) of one request to the router; no raising on 4xx/5xx."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{ROUTER}{path}", data, {"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            code = r.status
    except urllib.error.HTTPError as exc:
        raw, code = exc.read().decode(errors="replace"), exc.code
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, raw


def complete(prompt: str) -> int:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "temperature": 0}
    return call("/v1/completions", body, auth_headers())[0]


def prompt_tokens() -> dict[str, tuple[float, float]]:
    """Each engine's (prompt tokens, of them GPU prefix-cache hits)."""
    out = {}
    for h in INFERENCE:
        total = metric(HOSTS[h], "vllm:prompt_tokens_total")
        hit = metric(HOSTS[h], "vllm:prompt_tokens_by_source_total", source="local_cache_hit")
        out[h] = (total, hit)
    return out


def grew(before, after, index: int) -> list[str]:
    return [h for h in INFERENCE if after[h][index] > before[h][index]]


def workers() -> dict[str, bool]:
    code, found = call("/workers", headers=auth_headers())
    assert code == 200, found
    return {w["url"]: w["is_healthy"] for w in found["workers"]}


def ready_router(timeout: float = 60) -> None:
    """The router listens once an engine is healthy (after a deploy restarted it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if call("/readiness", headers=auth_headers(), timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"router not ready within {timeout} s")


def test_router_unit_hardened_and_every_engine_a_worker(converged):
    ready_router()
    show = ssh("ceph1", f"systemctl show -p ActiveState -p DynamicUser -p NoNewPrivileges {UNIT}")
    assert "ActiveState=active" in show.stdout and "DynamicUser=yes" in show.stdout
    # the key never on the command line
    assert "--api-key" not in ssh("ceph1", f"systemctl show -p ExecStart {UNIT}").stdout
    assert sorted(workers()) == sorted(f"http://{HOSTS[h]}:8000" for h in INFERENCE)


def test_no_route_without_the_key(converged):
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
    assert call("/v1/completions", body)[0] == 401
    assert call("/v1/completions", body, {"Authorization": "Bearer wrong"})[0] == 401
    # the router's own admin routes too: nobody without the key adds or removes a worker
    for path in ("/workers", "/list_workers", "/health"):
        assert call(path)[0] == 401, path
    assert call("/remove_worker?url=http://127.0.0.1:1", {})[0] == 401


def test_a_repeat_lands_on_the_engine_holding_its_prefix(converged):
    for _ in range(3):
        prompt = long_prompt(1024)
        before = prompt_tokens()
        assert complete(prompt) == 200
        first = prompt_tokens()
        (holder,) = grew(before, first, 0)
        assert complete(prompt) == 200
        second = prompt_tokens()
        # the same engine, served from its own prefix cache (the GPU tier), nothing recomputed
        assert grew(first, second, 0) == [holder]
        assert grew(first, second, 1) == [holder]


def test_verify_proves_a_routed_repeat_is_a_hit(converged):
    """verify.py's router step alone: the route ready with every engine, and a repeat sent
    through it served from a cache tier by the engine that served it cold (FAIL otherwise)."""
    latest, n = REPORTS / "verify-latest.json", len(INFERENCE)
    before = latest.read_text() if latest.exists() else None
    ready_router()
    started = time.monotonic()
    run = pyinfra("--data", "kvceph_verify_router_only=true", deploy="verify.py", json_out=False)
    print(f"verify.py router only: {time.monotonic() - started:.1f} s")
    reports = re.findall(r"kvceph verify: report (\S+\.json)", run.output)
    assert reports, run.output[-3000:]
    (step,) = json.loads((REPO / reports[0]).read_text())["steps"]
    assert (step["host"], step["step"], step["verdict"]) == ("ceph1", "router", "pass"), step
    assert re.match(
        rf"{MODEL} via ceph1:8100: {n}/{n} engines in the pool; cold on (\w+), the "
        r"repeat on \1 too: \d+ of \d+ prompt tokens from its GPU prefix cache",
        step["message"],
    ), step["message"]
    assert run.rc == 0, run.output[-3000:]
    # a router-only run is not the last verdict on the cache chain (status.py reads that)
    assert (latest.read_text() if latest.exists() else None) == before
    # the key never in the output
    assert api_key() not in run.output


def test_only_healthy_engines_get_requests(converged):
    gpu2 = f"http://{HOSTS['gpu2']}:8000"
    ssh("gpu2", "systemctl stop vllm")
    try:
        started = time.monotonic()
        while workers()[gpu2] and time.monotonic() - started < 10:
            time.sleep(0.2)
        left = time.monotonic() - started
        # 2 failed checks 1 s apart (kvceph_router_health_*), with a 2 s check timeout
        assert not workers()[gpu2], "gpu2 still in the pool after 10 s"
        print(f"gpu2 left the pool {left:.1f} s after its stop")
        codes = [complete(long_prompt(256)) for _ in range(9)]
        assert codes == [200] * 9
    finally:
        ssh("gpu2", "systemctl start vllm")
    wait_health(HOSTS["gpu2"])
    started = time.monotonic()
    while not workers()[gpu2] and time.monotonic() - started < 10:
        time.sleep(0.2)
    assert workers()[gpu2], "gpu2 not back in the pool 10 s after its readiness"
    print(f"gpu2 back in the pool {time.monotonic() - started:.1f} s after its readiness")


def test_a_roll_through_the_router_cuts_and_refuses_nothing(request, lab, converged):
    # Three clients, each its own prompt: cache_aware keeps each on one engine until that
    # engine drains (its /health 503) and the router moves it.
    clients = {f"client{i}": (HOSTS["ceph1"], 8100) for i in range(3)}
    ready_router()
    try:
        with StreamLoad(clients, max_tokens=60) as load:
            time.sleep(1)
            run = pyinfra("--data", "kvceph_lmcache_blocking_timeout_secs=108", json_out=False)
            time.sleep(1)
        assert run.rc == 0, run.output[-6000:]
        assert len(re.findall(r"restart batch \d+: \S+ vllm.service healthy", run.output)) == 3
        assert load.accepted(), "nothing got through the router"
        print(f"{len(load.accepted())} accepted, {len(load.refused())} refused")
        assert load.refused() == [], load.refused()[:5]
        assert load.cut() == [], load.cut()[:5]
        print(f"{len(load.accepted())} streams through the router during the roll, 0 cut")
    finally:
        if restore_needed(request, lab):
            restore = pyinfra(json_out=False)
            assert restore.rc == 0, restore.output[-4000:]
