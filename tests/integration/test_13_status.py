"""status.py on the lab: every field true against the engines' own /metrics, systemd and the
bucket; it changes nothing and takes no lock; verify.py's loads show up in its counters; a
changed setting is drift exactly where it applies; a host down is a row and a partial run."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import (
    HOSTS,
    INFERENCE,
    PYINFRA,
    REPO,
    REPORTS,
    SECRETS,
    lab_sh,
    pyinfra,
    s3_client,
    ssh,
    ssh_argv,
)
from lab_client import metric, wait_health

# What a status run must leave as it was: every file kvceph or the lab manages, and the state
# and main PID of every unit that serves (engines, Ceph, RGW, haproxy, sshd). Not the cache trim
# timer's record: the timer rewrites it every 5 minutes whatever status does (a false failure).
SNAPSHOT = textwrap.dedent(
    """
    find /etc/kvceph /etc/systemd/system /var/lib/vllm /var/lib/kvceph /usr/local/lib/kvceph \
      /etc/ceph /etc/hosts /usr/local/share/ca-certificates -type f 2>/dev/null \
      | grep -v -x /var/lib/kvceph/cache-trim.json | sort | xargs -r stat -c '%n %s %Y %a %U:%G' ; \
    find /etc/kvceph /var/lib/vllm/.aws -type f 2>/dev/null | sort | xargs -r sha256sum ; \
    for u in $(systemctl list-units --all --no-legend --plain --type=service \
        'vllm*' 'kvlab*' 'haproxy*' 'ssh*' | awk '{print $1}'); do \
      echo "$u $(systemctl show -p ActiveState -p SubState -p MainPID --value $u | tr '\\n' ' ')"; \
    done
    """
).strip()


def snapshot() -> dict[str, str]:
    with ThreadPoolExecutor(len(HOSTS)) as pool:
        outs = pool.map(lambda h: (h, ssh(h, SNAPSHOT).stdout), HOSTS)
    return dict(outs)


def status(*args: str, inventory: str = "inventories/lab.py", json_path=None, timeout=300):
    extra = ("--data", f"kvceph_status_json={json_path}") if json_path else ()
    return pyinfra(*args, *extra, inventory=inventory, deploy="status.py", json_out=False,
                   timeout=timeout)  # fmt: skip


def engine_metrics(h: str) -> dict[str, float]:
    ip = HOSTS[h]
    return {
        "external_queries": metric(ip, "vllm:external_prefix_cache_queries_total"),
        "external_hits": metric(ip, "vllm:external_prefix_cache_hits_total"),
        "loaded_tokens": metric(
            ip, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"
        ),
        "local_queries": metric(ip, "vllm:prefix_cache_queries_total"),
        "local_hits": metric(ip, "vllm:prefix_cache_hits_total"),
        "requests": metric(ip, "vllm:request_success_total"),
        "prompt_tokens": metric(ip, "vllm:prompt_tokens_total"),
    }


def unit(h: str) -> dict[str, str]:
    out = ssh(h, "systemctl show -p MainPID -p ActiveEnterTimestamp --timestamp=us+utc vllm")
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def bucket_listing() -> tuple[int, int]:
    objects, size, token = 0, 0, None
    client = s3_client()
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = client.list_objects_v2(Bucket="lmcache", **kw)
        objects += page.get("KeyCount", 0)
        size += sum(o["Size"] for o in page.get("Contents", []))
        if not page.get("IsTruncated"):
            return objects, size
        token = page["NextContinuationToken"]


@pytest.fixture(scope="module")
def first(converged, tmp_path_factory):
    """One status run on the converged lab, with the hosts' state around it and the run lock
    probed from ceph1 all the while it ran."""
    path = tmp_path_factory.mktemp("status") / "first.json"
    before = snapshot()
    prober = subprocess.Popen(
        [
            *ssh_argv("ceph1"),
            # The converged deploy left the lock file; flock -n opens it without touching it.
            "while [ ! -e /tmp/kvceph-status-done ]; do "
            "flock -n /var/lib/kvceph/deploy.lock true || echo HELD; sleep 0.2; done; "
            "rm -f /tmp/kvceph-status-done; echo probed",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    run = status(json_path=path)
    ssh("ceph1", "touch /tmp/kvceph-status-done")
    probed, _ = prober.communicate(timeout=60)
    after = snapshot()
    return {"run": run, "doc": json.loads(path.read_text()), "path": path, "before": before,
            "after": after, "probed": probed}  # fmt: skip


def test_every_field_is_present_and_true(first):
    run, doc = first["run"], first["doc"]
    assert run.rc == 0, run.output[-5000:]
    assert "saved GPU time (gpu1 at " in run.output and "): prefill curve (" in run.output
    assert not doc["partial"] and doc["problems"] == []
    rows = {r["host"]: r for r in doc["engines"]}
    assert sorted(rows) == sorted(INFERENCE)
    for h, r in rows.items():
        systemd = unit(h)
        assert r["reachable"] and r["health"] == 200 and not r["drift"], (h, r)
        assert (r["active"], r["sub_state"]) == ("active", "running")
        assert (
            r["main_pid"] == int(systemd["MainPID"])
            and r["since"] == systemd["ActiveEnterTimestamp"]
        )
        assert r["running_digest"] == r["desired_digest"] and len(r["desired_digest"]) == 64
        assert r["vllm"] == ("0.26.0" if h == "gaudi1" else "0.33.0") == r["vllm_desired"]
        assert r["lmcache"] == "0.5.6" and r["lab_engine"] == "0.1.0"
        # Nothing sent requests since: the engine's own /metrics says the same.
        for key, value in engine_metrics(h).items():
            assert r[key] == value, (h, key)
        spt = r["prefill_seconds_per_token"]
        assert r["saved_gpu_seconds"] == pytest.approx(r["reused_tokens"] * spt) and spt > 0
        assert r["hit_ratio"] == (
            r["external_hits"] / r["external_queries"] if r["external_queries"] else None
        )
    # both router hosts' routes (inventories/lab.py), each with every engine in its pool
    routers = {r["host"]: r for r in doc["routers"]}
    assert sorted(routers) == ["ceph1", "gaudi1"], doc["routers"]
    for h, r in routers.items():
        assert (r["port"], r["readiness"], r["error"], r["missing"]) == (8100, 200, None, []), r
        assert sorted(w["engine"] for w in r["workers"] if w["healthy"]) == sorted(
            f"{e}/vllm" for e in INFERENCE
        ), (h, r)
        assert f"ROUTER {h}:8100 Qwen/Qwen3-32B: ready, 3/3 engines in the pool" in run.output
    c = doc["cluster"]
    assert (c["objects"], c["bytes"]) == bucket_listing()
    assert c["quota_bytes"] == 4 << 30 and c["quota_source"] == "user quota"
    assert c["lifecycle_present"] and c["lifecycle_enabled"] and c["lifecycle_expiration_days"] == 7
    assert sorted(c["rgw_daemons"]) == ["gw1", "gw2"] and c["endpoint_reachable"]
    for gw in ("gw1", "gw2"):
        assert ssh("ceph1", f"systemctl is-active kvlab-rgw@{gw}").stdout.strip() == "active"
    latest = REPORTS / "verify-latest.json"
    if latest.exists():
        assert doc["verify"]["run"] == json.loads(latest.read_text())["run_id"]
    else:
        assert doc["verify"]["verdict"] == "never run"
    assert set(doc["probes"]) <= set(INFERENCE)
    png = REPORTS / f"status-{doc['run']}.png"
    assert png.stat().st_size > 10_000


def test_it_changes_nothing_and_takes_no_lock(first):
    assert first["after"] == first["before"]
    assert "HELD" not in first["probed"] and "probed" in first["probed"]
    assert "run lock" not in first["run"].output


def test_verify_loads_show_up_as_hits_and_saved_time(first, tmp_path):
    before = {r["host"]: r for r in first["doc"]["engines"]}
    # A 4096-token document: what verify loads is checked, not the lab's timing at 16k.
    tokens = ("--data", "kvceph_verify_document_tokens=4096")
    run = pyinfra(*tokens, deploy="verify.py", json_out=False, timeout=600)
    assert run.rc == 0, run.output[-5000:]
    report = json.loads((REPORTS / "verify-latest.json").read_text())
    after_run = status(json_path=tmp_path / "after.json")
    assert after_run.rc == 0, after_run.output[-5000:]
    doc = json.loads((tmp_path / "after.json").read_text())
    after = {r["host"]: r for r in doc["engines"]}
    assert doc["verify"]["run"] == report["run_id"] and doc["verify"]["verdict"] == "pass"
    rose = 0
    for h in INFERENCE:
        steps = [x for x in report["steps"] if x["host"] == h and x["hit_tokens"] is not None]
        a, b = after[h], before[h]
        if a["main_pid"] == b["main_pid"]:
            # Not restarted by verify (gpu2, the cross-node step): up by what verify loaded there.
            loaded = sum(x["hit_tokens"] for x in steps)
            assert a["loaded_tokens"] - b["loaded_tokens"] == loaded > 0, h
            # Saved time rose by what verify loaded, at the figure of the run after it (verify
            # measures the group's cold prefill, which joins the prefill curve).
            spt = a["prefill_seconds_per_token"]
            assert a["saved_gpu_seconds"] - b["reused_tokens"] * spt == pytest.approx(loaded * spt)
            assert a["saved_gpu_seconds"] > b["saved_gpu_seconds"]
            rose += loaded
        else:
            # Restarted (warm, then fallback): the counters start again; what is left is the
            # fallback request's (its objects deleted: nothing loaded).
            assert a["since"] != b["since"] and steps[-1]["step"] == "fallback", h
            assert a["loaded_tokens"] == steps[-1]["hit_tokens"] == 0, h
            assert a["saved_gpu_seconds"] == 0, h
    assert rose == 4096  # the cross-node step's whole document


@pytest.fixture(scope="module")
def drift_run(converged, tmp_path_factory):
    """One status run of the lab inventory with gpu2 alone given another GPU memory share (not
    deployed), and a deploy started while it reads (one status run for both checks)."""
    tmp = tmp_path_factory.mktemp("drift")
    (tmp / "lab.py").write_text(
        textwrap.dedent(
            f"""
            import runpy as _runpy

            _lab = _runpy.run_path({str(REPO / "inventories" / "lab.py")!r})
            ceph_admin, rgw, gaudi = _lab["ceph_admin"], _lab["rgw"], _lab["gaudi"]
            # every group of the lab's (its group_data's router keys need their router host)
            router = _lab["router"]
            gpu = [_lab["gpu"][0]]
            gpu.append((_lab["gpu"][1][0], {{**_lab["gpu"][1][1],
                        "kvceph_gpu_memory_utilization": 0.5}}))
            """
        )
    )
    path = tmp / "drift.json"
    argv = [PYINFRA, "-y", "--data", f"kvceph_status_json={path}", str(tmp / "lab.py")]
    proc = subprocess.Popen(
        [*argv, "status.py"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "KVCEPH_SECRETS_FILE": str(SECRETS), "PYTHONUNBUFFERED": "1"},
    )
    seen = []
    try:
        for line in proc.stdout:  # status reads while pyinfra loads status.py
            seen.append(line)
            if "Loading: status.py" in line:
                break
        running = proc.poll() is None
        # The Ceph admin host alone: the run lock lives there (the quickest deploy taking it).
        deploy = pyinfra("--limit", "ceph1", json_out=False)
        rest, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(seen) + rest
    doc = json.loads(path.read_text()) if path.exists() else None
    return {"rc": proc.returncode, "output": output, "rest": rest, "doc": doc,
            "running": running, "deploy": deploy}  # fmt: skip


def test_a_changed_setting_is_drift_exactly_where_it_applies(drift_run):
    assert drift_run["rc"] == 0, drift_run["output"][-5000:]
    rows = {r["host"]: r for r in drift_run["doc"]["engines"]}
    assert [h for h, r in rows.items() if r["drift"]] == ["gpu2"]
    assert "running digest differs" in rows["gpu2"]["drift_reasons"]
    named = [(s["field"], s["running"], s["desired"], s["setting"])
             for s in rows["gpu2"]["drift_settings"]]  # fmt: skip
    assert named == [("--gpu-memory-utilization", "0.55", "0.5", "kvceph_gpu_memory_utilization")]
    shown = "DRIFT: --gpu-memory-utilization 0.55 -> 0.5 (kvceph_gpu_memory_utilization)"
    assert shown in drift_run["output"]


def test_a_deploy_started_during_a_status_run_is_not_blocked(drift_run):
    deploy = drift_run["deploy"]
    assert drift_run["running"], drift_run["output"][-4000:]
    assert deploy.rc == 0 and "holds the lock" not in deploy.output, deploy.output[-4000:]
    assert "run lock on ceph1: taken" in deploy.output
    # Status read and reported after the deploy had been started beside it.
    assert "kvceph status: report" in drift_run["rest"]


def test_a_host_down_is_a_row_and_the_run_is_partial(converged, tmp_path):
    lab_sh("stop", "gpu2")
    try:
        run = status(json_path=tmp_path / "down.json")
    finally:
        lab_sh("start", "gpu2")
        wait_health(HOSTS["gpu2"], timeout=180)
    assert run.rc != 0, run.output[-4000:]
    assert "kvceph status: partial: gpu2 vllm.service: unreachable" in run.output
    assert "Traceback" not in run.output
    doc = json.loads((tmp_path / "down.json").read_text())
    rows = {r["host"]: r for r in doc["engines"]}
    assert doc["partial"] and not rows["gpu2"]["reachable"]
    assert "UNREACHABLE" in run.output
    for h in ("gpu1", "gaudi1"):
        assert rows[h]["health"] == 200 and rows[h]["external_queries"] is not None, h
    assert doc["cluster"]["reachable"] and doc["cluster"]["objects"] is not None
