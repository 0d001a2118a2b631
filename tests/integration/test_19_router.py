"""The cache-aware routers on ceph1 and gaudi1 (inventory group ``router``, one instance per
router host, docs/router.md): a hardened unit on each serving the lab's model on :8100 with
every engine a worker; no route open without the engines' key; a repeat lands on the engine that
holds its prefix (a GPU-tier hit, not a recompute), and verify.py's router step proves it on
both; an engine that stops leaves the pool within the health bound and returns after readiness,
and no request through the router fails meanwhile; a rolling restart of every engine under a
steady stream through the router cuts and refuses none of it; one router killed (SIGKILL) under
load costs the other router's clients nothing, its own clients a fast connection error, and
systemd brings it back."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

from conftest import HOSTS, INFERENCE, REPO, REPORTS, pyinfra, restore_needed, ssh
from lab_client import StreamLoad, api_key, auth_headers, long_prompt, metric, wait_health

# inventories/lab.py's group router: one instance per router host
ROUTER_HOSTS = ("ceph1", "gaudi1")
ROUTERS = {h: f"http://{HOSTS[h]}:8100" for h in ROUTER_HOSTS}
ROUTER = ROUTERS["ceph1"]
UNIT = "kvceph-router@8100.service"
MODEL = "Qwen/Qwen3-32B"


def call(
    path: str, body: dict | None = None, headers=None, timeout: float = 60, router: str = ROUTER
):
    """(status, parsed body or text) of one request to a router; no raising on 4xx/5xx."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{router}{path}", data, {"Content-Type": "application/json", **(headers or {})}
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


def workers(router: str = ROUTER) -> dict[str, bool]:
    code, found = call("/workers", headers=auth_headers(), router=router)
    assert code == 200, found
    return {w["url"]: w["is_healthy"] for w in found["workers"]}


def ready_router(timeout: float = 60, router: str = ROUTER) -> None:
    """The router listens once an engine is healthy (after a deploy restarted it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if call("/readiness", headers=auth_headers(), timeout=5, router=router)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"router {router} not ready within {timeout} s")


def test_router_unit_hardened_and_every_engine_a_worker(converged):
    for host, router in ROUTERS.items():
        ready_router(router=router)
        show = ssh(host, f"systemctl show -p ActiveState -p DynamicUser -p NoNewPrivileges {UNIT}")
        assert "ActiveState=active" in show.stdout and "DynamicUser=yes" in show.stdout, host
        # the key never on the command line
        assert "--api-key" not in ssh(host, f"systemctl show -p ExecStart {UNIT}").stdout, host
        expected = sorted(f"http://{HOSTS[h]}:8000" for h in INFERENCE)
        assert sorted(workers(router)) == expected, host


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
    steps = json.loads((REPO / reports[0]).read_text())["steps"]
    # one step per router host: each instance has its own pool and radix tree
    assert [(s["host"], s["step"], s["verdict"]) for s in steps] == [
        (h, "router", "pass") for h in ROUTER_HOSTS
    ], steps
    for step in steps:
        assert re.match(
            rf"{MODEL} via {step['host']}:8100: {n}/{n} engines in the pool; cold on (\w+), "
            r"the repeat on \1 too: \d+ of \d+ prompt tokens from its GPU prefix cache",
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


def router_unit(host: str) -> tuple[int, int]:
    """(MainPID, NRestarts) of the router's unit on ``host``."""
    out = ssh(host, f"systemctl show -p MainPID -p NRestarts {UNIT}").stdout
    found = dict(line.split("=", 1) for line in out.split())
    return int(found["MainPID"]), int(found["NRestarts"])


def test_a_router_killed_under_load_costs_the_other_routers_clients_nothing(converged):
    """Two clients pinned to each router; gaudi1's router SIGKILLed by PID while both of its
    clients are mid-stream. ceph1's clients lose nothing; gaudi1's two streams in flight are cut
    at once and its clients' next connections are refused at once (no hang) until systemd has
    restarted the router (Restart=always), which then serves them again."""
    for router in ROUTERS.values():
        ready_router(router=router)
    clients = {f"{h}-{i}": (HOSTS[h], 8100) for h in ROUTER_HOSTS for i in range(2)}
    killed = [name for name in clients if name.startswith("gaudi1-")]
    pid, restarts = router_unit("gaudi1")
    # 3000 tokens at the lab engine's 1 ms each: a 3 s stream, long enough for the kill's ssh
    with StreamLoad(clients, max_tokens=3000) as load:
        deadline = time.monotonic() + 20
        while not all(0 < load.current.get(n, {}).get("tokens", 0) < 1500 for n in killed):
            assert time.monotonic() < deadline, "gaudi1's clients never both mid-stream"
            time.sleep(0.02)
        in_flight = [load.current[n] for n in killed]
        ssh("gaudi1", f"kill -KILL {pid}")
        killed_at = time.monotonic()
        # systemd restarts it (RestartSec=2); it listens once an engine is healthy
        while router_unit("gaudi1")[0] in (0, pid):
            assert time.monotonic() < killed_at + 15, "systemd did not restart gaudi1's router"
            time.sleep(0.2)
        ready_router(30, ROUTERS["gaudi1"])
        back_at = time.monotonic()
        # each of gaudi1's clients completes streams through the restarted router again
        deadline = time.monotonic() + 20
        while not all(
            any(r["t0"] > back_at and r["done"] for r in load.records if r["engine"] == n)
            for n in killed
        ):
            assert time.monotonic() < deadline, "gaudi1's router not serving after its restart"
            time.sleep(0.2)
    new_pid, new_restarts = router_unit("gaudi1")
    assert new_pid not in (0, pid) and new_restarts == restarts + 1, (pid, new_pid, new_restarts)
    print(f"gaudi1's router back {back_at - killed_at:.1f} s after the kill")
    by = {h: [r for r in load.records if r["engine"].startswith(h)] for h in ROUTER_HOSTS}
    # the surviving router: every stream it was sent accepted and complete
    survivor = by["ceph1"]
    assert survivor and all(r["status"] == 200 for r in survivor), survivor[:3]
    assert [r for r in survivor if not (r["done"] and r["tokens"] == 3000)] == []
    # the killed router: exactly its two streams in flight cut, each ended within 2 s of the
    # kill (the dead process's sockets closed: the body ends early, without [DONE])
    cut = [r for r in by["gaudi1"] if r["status"] == 200 and not r["done"]]
    assert sorted(map(id, cut)) == sorted(map(id, in_flight)), cut
    assert all(r["tokens"] < 3000 and r["t1"] - killed_at < 2 for r in cut), cut
    # then only refused connections, each at once, until it was back; the rest complete
    refused = [r for r in by["gaudi1"] if r["status"] is None and r not in cut]
    assert all(r["error"] and r["t1"] - r["t0"] < 1 for r in refused), refused[:3]
    assert all(r["t1"] < back_at + 1 for r in refused), "refused after the router was back"
    complete = [r for r in by["gaudi1"] if r["done"] and r["tokens"] == 3000]
    assert len(cut) + len(refused) + len(complete) == len(by["gaudi1"]), by["gaudi1"]
    print(
        f"ceph1: {len(survivor)} streams, all complete; gaudi1: {len(cut)} cut at the kill, "
        f"{len(refused)} refused while it restarted, {len(complete)} complete"
    )


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
