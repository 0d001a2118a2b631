"""The router's routes from the lab's own group_data and inventory layout: one route per served
model, every engine of every cache group serving it a worker; the launcher's config and the
unit carry no secret; the settings refuse what would not work."""

from __future__ import annotations

import ast
import json
import subprocess

import pytest

from deploys import settings
from deploys.router import routes as routing
from deploys.router import unit
from deploys.settings import group_data
from deploys.settings.reader import SettingsError

LAB = {
    "ceph1": ("ceph_admin", "rgw", "router", "lab"),
    "gpu1": ("gpu", "lab"),
    "gpu2": ("gpu", "lab"),
    "gaudi1": ("gaudi", "lab"),
}
IPS = {
    "ceph1": "10.213.7.11",
    "gpu1": "10.213.7.21",
    "gpu2": "10.213.7.22",
    "gaudi1": "10.213.7.31",
}
LAB_ENV = {"KVCEPH_LAB_INSTANCE": "0", "KVCEPH_LAB_CEPH": "pacific"}


def hosts(**extra) -> dict:
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)
    data.update(extra)
    # inventories/lab.py: the Gaudi host runs TP 1, its own cache group
    gaudi = {**data, "kvceph_tensor_parallel_size": 1}
    return {n: settings.load(gaudi if n == "gaudi1" else data, n, g) for n, g in LAB.items()}


def test_one_route_per_served_model_with_every_engine_of_every_cache_group():
    h = hosts()
    (route,) = routing.routes(h, IPS, h["ceph1"].router, "ceph1")
    assert route.model == h["gpu1"].engine.model
    assert route.port == 8100
    assert routing.worker_urls(route) == [
        "http://10.213.7.31:8000",
        "http://10.213.7.21:8000",
        "http://10.213.7.22:8000",
    ]
    # gaudi1 serves the same model at TP 1: its own cache group, the same route.
    assert len(route.cache_groups) == 2
    assert route.unit == "kvceph-router@8100.service"


def test_several_engines_per_host_are_each_a_worker():
    h = hosts()
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)
    data.update(
        kvceph_accelerator_count=4,
        kvceph_engines=[
            {"name": "engine-a", "devices": [0, 1], "port": 8000},
            {"name": "engine-b", "devices": [2, 3], "port": 8001},
        ],
    )
    h["gpu1"] = settings.load(data, "gpu1", LAB["gpu1"])
    (route,) = routing.routes(h, IPS, h["ceph1"].router, "ceph1")
    gpu1 = [w for w in route.workers if w.host == "gpu1"]
    assert [(w.engine, w.url) for w in gpu1] == [
        ("engine-a", "http://10.213.7.21:8000"),
        ("engine-b", "http://10.213.7.21:8001"),
    ]


def test_a_second_served_model_needs_its_own_port():
    h = hosts()
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)
    data["kvceph_model"] = "Other/Model-8B"
    data.pop("kvceph_model_revision", None)
    data.pop("kvceph_model_source", None)
    data.pop("kvceph_model_mirror_from", None)
    h["gaudi1"] = settings.load(data, "gaudi1", LAB["gaudi1"])
    with pytest.raises(SettingsError, match="ceph1: kvceph_router_ports has no port for"):
        routing.routes(h, IPS, h["ceph1"].router, "ceph1")
    h["ceph1"] = hosts(kvceph_router_ports={h["gpu1"].engine.model: 8100, "Other/Model-8B": 8101})[
        "ceph1"
    ]
    got = routing.routes(h, IPS, h["ceph1"].router, "ceph1")
    assert [(r.model, r.port, len(r.workers)) for r in got] == [
        ("Other/Model-8B", 8101, 1),
        (h["gpu1"].engine.model, 8100, 2),
    ]


def test_config_and_unit_carry_no_key_and_name_the_health_bound():
    h = hosts()
    r = h["ceph1"].router
    (route,) = routing.routes(h, IPS, r, "ceph1")
    config = routing.config(route, r)
    assert config["policy"] == "cache_aware"
    # An engine leaves the pool after 2 failed checks 1 s apart (docs/router.md "Drain").
    assert (config["health_check_interval_secs"], config["health_failure_threshold"]) == (1, 2)
    assert config["health_check_endpoint"] == "/health"
    # the retries' backoff outlasts that bound, 3 checks of up to 1 s + 2 s each and 2 s:
    # 100+150+225+338+506+759 ms + 9 x 1000 ms > 11 s
    assert config["retry_max_retries"] == 16
    assert "api_key" not in json.dumps(config)
    text = unit.text(r, api_key=True)
    assert f"LoadCredential=api-key:{unit.KEY_PATH}" in text
    assert "DynamicUser=yes" in text and "CapabilityBoundingSet=\n" in text
    assert "--api-key" not in text
    assert routing.api_key_validation_urls(route)[0] == "http://10.213.7.31:8000/v1/models"


def test_the_launcher_takes_the_key_from_systemds_credentials_only():
    tree = ast.parse(unit.LAUNCHER_SOURCE.read_text())
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "argv" in names  # the config path only
    assert "CREDENTIALS_DIRECTORY" in unit.LAUNCHER_SOURCE.read_text()


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("kvceph_router_policy", "random", "is not a policy kvceph deploys"),
        ("kvceph_router_port", 80, "must be >= 1024"),
        ("kvceph_router_ports", {"a": 8100, "b": 8100}, "gives two models one port"),
        ("kvceph_router_ports", ["a"], "is not a mapping"),
    ],
)
def test_settings_refuse(key, value, problem):
    with pytest.raises(SettingsError, match=problem):
        hosts(**{key: value})


# --- issue 49: routes that reach no engine, or one engine twice ------------------------------


def test_a_route_for_a_model_no_engine_serves_is_refused():
    h = hosts()
    model = h["gpu1"].engine.model
    h["ceph1"] = hosts(kvceph_router_ports={model: 8100, "Qwen/Qwen3-8B": 8101})["ceph1"]
    with pytest.raises(SettingsError) as caught:
        routing.routes(h, IPS, h["ceph1"].router, "ceph1")
    assert str(caught.value) == (
        "ceph1: kvceph_router_ports = {'Qwen/Qwen3-8B': 8101}: no engine of the inventory serves "
        "that model (the route would have no worker); fix: remove it, or name the model as "
        "kvceph_model spells it"
    )


def test_a_worker_listed_twice_is_refused():
    h = hosts()
    with pytest.raises(SettingsError) as caught:
        routing.routes(h, {**IPS, "gpu2": IPS["gpu1"]}, h["ceph1"].router, "ceph1")
    assert str(caught.value) == (
        "gpu2: worker http://10.213.7.21:8000 of route 'Qwen/Qwen3-32B' is also gpu1's engine "
        "vllm: two inventory entries reach one engine (the router would count it twice); fix: "
        "give each host its own address and each engine its own port"
    )


def test_engines_on_loopback_behind_a_router_on_another_host_are_refused():
    h = hosts()
    h["gpu1"] = hosts(kvceph_vllm_bind="127.0.0.1")["gpu1"]
    with pytest.raises(SettingsError) as caught:
        routing.routes(h, IPS, h["ceph1"].router, "ceph1")
    assert str(caught.value) == (
        "gpu1: kvceph_vllm_bind = '127.0.0.1': its engines listen on loopback only, and the "
        "router on ceph1 cannot reach them; fix: bind them to an address ceph1 reaches (or "
        "0.0.0.0), or run the router on gpu1"
    )
    # The router on the engine's own host reaches loopback.
    assert routing.routes(h, IPS, h["ceph1"].router, "gpu1")


def test_a_missing_router_wheelhouse_names_the_routers_setting(tmp_path):
    from pyinfra.api.exceptions import DeployError

    from deploys.stages.engine_software import wheels

    with pytest.raises(DeployError, match=r"^controller: kvceph_router_wheelhouse = "):
        wheels(str(tmp_path), "kvceph_router_wheelhouse")


def test_no_circuit_breaker_and_metrics_where_prometheus_reaches_them():
    """The circuit breaker kept a drained engine out 60 s after it was back (test_19's 503s:
    docs/router.md "Drain"); the health checks alone decide the pool."""
    h = hosts()
    (route,) = routing.routes(h, IPS, h["ceph1"].router, "ceph1")
    config = routing.config(route, h["ceph1"].router)
    assert config["disable_circuit_breaker"] is True
    assert (config["prometheus_host"], config["prometheus_port"]) == ("0.0.0.0", 9100)


def test_a_router_restart_drains_and_waits_until_it_listens():
    text = unit.text(hosts()["ceph1"].router, True)
    assert f"TimeoutStopSec={unit.STOP_TIMEOUT}\n" in text
    cmd = unit.restart_command(8100, "/opt/kvceph/router", "0.0.0.0")
    assert cmd.startswith(f"timeout {unit.STOP_TIMEOUT + 60} systemctl restart kvceph-router@8100")
    assert cmd.endswith(f"8100 {unit.LISTEN_TIMEOUT} 127.0.0.1")
    assert "::1" in unit.restart_command(8100, "/v", "::")


def test_the_restart_wait_ends_at_once_when_no_engine_of_the_route_listens(tmp_path):
    """A first converge installs the router before its engines: vllm-router listens only once
    one is healthy, so the wait must not fail then (the rehearsal of 2026-12-07 did: 120 s, then
    an error on every fresh lab); with an engine up and the router not listening it still fails."""
    import socket
    import sys

    engine = socket.socket()
    engine.bind(("127.0.0.1", 0))
    engine.listen()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    down, up = free.getsockname()[1], engine.getsockname()[1]
    free.close()

    def wait(*engines: str, timeout: str = "1"):
        argv = [sys.executable, "-c", unit._LISTENS, str(down), timeout, "127.0.0.1", *engines]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)

    first = wait(f"127.0.0.1:{down}")
    assert first.returncode == 0 and "none of its engines listens yet" in first.stdout
    stuck = wait(f"127.0.0.1:{up}")
    assert stuck.returncode == 1 and "not listening after 1 s" in stuck.stderr
    engine.close()
    cmd = unit.restart_command(8100, "/v", "0.0.0.0", ("10.0.0.21:8000", "[fd00::1]:8000"))
    assert cmd.endswith("127.0.0.1 10.0.0.21:8000 '[fd00::1]:8000'")


def test_every_router_host_is_a_scrape_target_with_its_alerts():
    from deploys.monitoring import files, targets

    h = hosts()
    data = group_data.read(("all", "lab"), LAB_ENV)
    data.pop("kvceph_s3_ca_bundle", None)
    two = {**h, "gpu2": settings.load(data, "gpu2", ("gpu", "router", "lab"))}
    out = files.rendered(two, IPS, targets.ScrapeOptions("/x", False))
    found = json.loads(out[targets.ROUTER_FILE])
    assert [(t["targets"], t["labels"]["host"]) for t in found] == [
        (["10.213.7.11:9100"], "ceph1"),
        (["10.213.7.22:9100"], "gpu2"),
    ]
    assert "KvcephNoRouter" in out["rules/kvceph-router.yml"]
    none = {**h, "ceph1": settings.load(data, "ceph1", ("ceph_admin", "rgw", "lab"))}
    out = files.rendered(none, IPS, targets.ScrapeOptions("/x", False))
    assert json.loads(out[targets.ROUTER_FILE]) == []
    assert "KvcephNoRouter" not in out["rules/kvceph-router.yml"]
