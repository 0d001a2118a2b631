"""The monitoring stage's files in a real Prometheus (Debian's package, on the controller,
listening on loopback only): it scrapes every lab engine through kvceph's gate with the API key
from its credentials file, and "engine down" fires for a stopped engine within two minutes and
resolves after the restart; a bucket over its quota, as status.py reads it and writes it for
node_exporter's textfile collector (here a loopback file server stands in for node_exporter),
fires the quota alerts. The files come from the same functions the stage writes with; the
scrape and evaluation intervals are short (2 s), the rules are the production ones."""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml
from conftest import HOSTS, INFERENCE, REPO, pyinfra, s3_client, ssh
from lab_client import api_key, wait_health

from deploys import settings
from deploys.monitoring import files, targets
from deploys.settings import group_data

PROMETHEUS = shutil.which("prometheus")
# One port per lab instance, on loopback only.
PORT = 19090 + int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)
BASE = f"http://127.0.0.1:{PORT}"
TEXTFILE_PORT = PORT + 100  # the stand-in for node_exporter's textfile collector
PROM_FILE = "kvceph.prom"


def quota(verb: str) -> str:
    return f"radosgw-admin quota {verb} --quota-scope=user --uid=kvceph-s3-admin"


def lab_settings() -> dict:
    """Every lab host's settings as the deploy reads them: group_data and the inventory."""
    data = group_data.read(("all", "lab"))
    inventory = runpy.run_path(str(REPO / "inventories" / "lab.py"))
    groups: dict[str, list[str]] = {}
    own: dict[str, dict] = {}
    for group in ("ceph_admin", "rgw", "gpu", "gaudi"):
        for name, host_data in inventory.get(group, []):
            groups.setdefault(name, []).append(group)
            own.setdefault(name, {}).update(
                {k: v for k, v in host_data.items() if k.startswith("kvceph_")}
            )
    return {h: settings.load({**data, **own[h]}, h, (*g, "lab")) for h, g in groups.items()}


def api(path: str, **query) -> dict:
    url = f"{BASE}{path}?{urllib.parse.urlencode(query)}" if query else f"{BASE}{path}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())["data"]


def wait(what: str, check, timeout: float, step: float = 1.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@pytest.fixture(scope="module")
def prometheus(converged, tmp_path_factory):
    if PROMETHEUS is None:
        pytest.fail("prometheus missing: apt-get install --no-install-recommends prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    key = api_key()
    o = targets.ScrapeOptions(directory=str(tmp), api_key=key is not None)
    # The lab engine loads in seconds: its "engine down" may fire after a minute (fleets: 5m)
    for rel, text in files.rendered(lab_settings(), HOSTS, o, engine_down_for="1m").items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    if key:
        (tmp / targets.API_KEY_FILE).write_text(key + "\n")
        (tmp / targets.API_KEY_FILE).chmod(0o600)
    config = targets.prometheus_config(
        o, {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"}}
    )
    textfile = {"job_name": "textfile", "metrics_path": f"/{PROM_FILE}"}
    config["scrape_configs"].append(
        {**textfile, "static_configs": [{"targets": [f"127.0.0.1:{TEXTFILE_PORT}"]}]}
    )
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    (tmp / "textfile").mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(TEXTFILE_PORT)],
        cwd=tmp / "textfile",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp}/prometheus.yml",
            f"--storage.tsdb.path={tmp}/data",
            f"--web.listen-address=127.0.0.1:{PORT}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait(
            "prometheus ready", lambda: urllib.request.urlopen(f"{BASE}/-/ready").status == 200, 60
        )
        yield tmp
    finally:
        for p in (proc, server):
            p.terminate()
            p.wait(timeout=30)
        log.close()


def engine_targets() -> dict[str, dict]:
    active = api("/api/v1/targets")["activeTargets"]
    return {t["labels"]["host"]: t for t in active if t["labels"]["job"] == "kvceph-engines"}


def engine_down(host: str) -> str | None:
    for alert in api("/api/v1/alerts")["alerts"]:
        if alert["labels"]["alertname"] == "KvcephEngineDown" and alert["labels"]["host"] == host:
            return alert["state"]
    return None


def test_prometheus_scrapes_every_engine_through_the_gate(prometheus):
    up = wait(
        "every engine target up",
        lambda: (t := engine_targets()) and all(x["health"] == "up" for x in t.values()) and t,
        60,
    )
    assert sorted(up) == sorted(INFERENCE)
    assert api_key() is not None  # the lab's gate has a key: Prometheus sent it from the file
    assert api_key() not in "".join(p.read_text() for p in prometheus.glob("*.yml"))
    ratio = api("/api/v1/query", query="count(vllm:external_prefix_cache_queries_total)")
    assert ratio["result"] and float(ratio["result"][0]["value"][1]) == len(INFERENCE)


def test_a_stopped_engine_fires_engine_down_and_resolves_after_restart(prometheus):
    wait("gpu2 scraped up", lambda: engine_targets()["gpu2"]["health"] == "up", 60)
    ssh("gpu2", "systemctl stop vllm")
    stopped = time.monotonic()
    try:
        wait("KvcephEngineDown firing for gpu2", lambda: engine_down("gpu2") == "firing", 120)
        fired = time.monotonic() - stopped
        assert engine_down("gpu1") is None
    finally:
        ssh("gpu2", "systemctl start vllm")
        wait_health(HOSTS["gpu2"], timeout=120)
    assert fired < 120
    wait("KvcephEngineDown resolved for gpu2", lambda: engine_down("gpu2") is None, 60)
    print(f"engine down fired {fired:.0f} s after the stop")


def firing(alertname: str) -> set[str]:
    alerts = api("/api/v1/alerts")["alerts"]
    return {a["labels"].get("bucket", "") for a in alerts
            if a["labels"]["alertname"] == alertname and a["state"] == "firing"}  # fmt: skip


def test_a_bucket_over_its_quota_fires_the_quota_alerts(prometheus):
    """The engines' user's quota (what the deploy sets and status.py reads first, issue 36) just
    under what the bucket holds: status.py's text file makes both quota alerts fire; the
    deployed quota comes back."""
    key = "kvceph-monitoring-test/filler"
    s3_client().put_object(Bucket="lmcache", Key=key, Body=b"x" * 65536)
    stats = json.loads(ssh("ceph1", "radosgw-admin bucket stats --bucket=lmcache").stdout)
    used = sum(u.get("size", 0) for u in stats.get("usage", {}).values())
    info = json.loads(ssh("ceph1", "radosgw-admin user info --uid=kvceph-s3-admin").stdout)[
        "user_quota"
    ]
    assert info["enabled"] and info["max_size"] > used, info
    try:
        ssh("ceph1", f"{quota('set')} --max-size={used - 1}")
        prom = prometheus / "textfile" / PROM_FILE
        run = pyinfra("--data", f"kvceph_status_metrics={prom}", deploy="status.py",
                      json_out=False)  # fmt: skip
        assert prom.exists(), run.output[-3000:]
        wait("both quota alerts firing", lambda: firing("KvcephBucketQuotaFull") == {"lmcache"}
             and firing("KvcephBucketQuotaHigh") == {"lmcache"}, 60)  # fmt: skip
    finally:
        ssh("ceph1", f"{quota('set')} --max-size={info['max_size']}")
        s3_client().delete_object(Bucket="lmcache", Key=key)
