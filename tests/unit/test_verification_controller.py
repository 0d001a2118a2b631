"""pyinfra glue of verify.py: endpoints from the inventory, bounded remote commands."""

from types import SimpleNamespace

from pyinfra.api import Config

from deploys import settings
from deploys.settings.reader import SettingsError
from deploys.verification import controller

LAB = {
    "kvceph_rgw_dns_name": "s3.kvlab",
    "kvceph_lab": True,
    "kvceph_s3_endpoint": "http://s3.kvlab:80",
    "kvceph_s3_endpoint_ip": "10.213.7.11",
    "kvceph_vllm_port": 8001,
}


class Data(dict):
    """Host data as pyinfra reads it: items and attributes (``host.data._sudo``)."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class FakeHost:
    state = SimpleNamespace(config=Config())
    current_deploy_kwargs = None

    def __init__(self, name, data, ok=True, lines=()):
        self.name, self.data, self.connected = name, Data(data), True
        self.ok, self.lines, self.calls = ok, list(lines), []

    def run_shell_command(self, command, **kwargs):
        self.calls.append((str(command), kwargs))
        out = [SimpleNamespace(line=x, buffer_name="stdout") for x in self.lines]
        return self.ok, SimpleNamespace(output_lines=[x.line for x in out])


class FakeInventory:
    def __init__(self, *hosts):
        self.hosts = {h.name: h for h in hosts}

    def get_host(self, name):
        return self.hosts[name]


def test_target_uses_inventory_address_port_and_scheme():
    data = {**LAB, "kvceph_verify_scheme": "https"}
    hs = settings.load(data, "gpu1", ["gpu"])
    t = controller.target_for(FakeHost("gpu1", {"ssh_hostname": "10.213.7.21"}), hs, hs.verify)
    assert t.base_url == "https://10.213.7.21:8001"
    assert (t.model, t.tensor_parallel_size, t.chunk_size) == ("Qwen/Qwen3-32B", 2, 256)
    # kvceph's connector: the group's namespace folder (deploys/settings/namespace.py)
    ns = "kv/Qwen%2FQwen3-32B@tp2@pp1@-@bfloat16@c256@kv-split@naive@none/"
    assert t.prefix == t.namespace == ns
    v6 = controller.target_for(FakeHost("gpu1", {"ssh_hostname": "fd00::21"}), hs, hs.verify)
    assert v6.base_url == "https://[fd00::21]:8001"
    named = controller.target_for(FakeHost("gpu1.lab", {}), hs, hs.verify)
    assert named.base_url == "https://gpu1.lab:8001"


def test_restart_is_bounded_and_reports_output_on_one_line():
    h = FakeHost("gpu1", {"_sudo": True}, ok=False, lines=["Job failed.", "See journalctl."])
    err = controller.SshControl(FakeInventory(h)).restart("gpu1", 120)
    cmd, kwargs = h.calls[0]
    assert cmd == "timeout 120 systemctl restart vllm"
    assert kwargs["_sudo"] is True and kwargs["_timeout"] == 135
    assert err == "systemctl restart vllm on gpu1: Job failed.; See journalctl."
    ok = FakeHost("gpu2", {}, ok=True)
    assert controller.SshControl(FakeInventory(ok)).restart("gpu2", 10) is None


def test_journal_grep_counts_the_message():
    h = FakeHost("gpu1", {}, lines=["2"])
    control = controller.SshControl(FakeInventory(h))
    assert control.journal_has("gpu1", 1764464400.7, "S3 connection disabled") is True
    cmd = h.calls[0][0]
    assert cmd.startswith("timeout 30 journalctl -u vllm --since @1764464400 ")
    assert "grep -c -F 'S3 connection disabled' || true" in cmd
    h.lines = ["0"]
    assert control.journal_has("gpu1", 0, "x") is False
    h.ok = False
    assert control.journal_has("gpu1", 0, "x") is None


def test_verify_settings_defaults_and_one_line_errors():
    import pytest

    vs = settings.load(LAB, "gpu1", ["gpu"]).verify
    assert (vs.scheme, vs.s3_endpoint, vs.document_tokens) == ("http", None, 16384)
    assert (vs.warm_ratio, vs.report_dir, vs.cleanup) == (1.0, "reports", True)
    for key, bad, problem in (
        ("kvceph_verify_scheme", "ftp", "must be one of http, https"),
        ("kvceph_verify_s3_endpoint", "10.213.7.11:80", "scheme must be http or https"),
        ("kvceph_verify_warm_ratio", 1.5, "must be a number in (0.0, 1.0]"),
        ("kvceph_verify_document_tokens", 100, "must be >= 256"),
        ("kvceph_verify_request_timeout", 0, "must be >= 5"),
    ):
        with pytest.raises(SettingsError) as err:
            settings.load({**LAB, key: bad}, "gpu1", ["gpu"])
        msg = str(err.value)
        assert msg.startswith(f"gpu1: {key} = {bad!r}: {problem}") and "\n" not in msg
    lab = settings.load({**LAB, "kvceph_verify_s3_endpoint": "http://10.213.7.11:80"}, "g", ["gpu"])
    assert lab.verify.s3_endpoint == "http://10.213.7.11:80"


def test_every_engine_is_a_target_restarted_through_its_own_unit():
    data = {
        **LAB,
        "kvceph_accelerator_count": 4,
        "kvceph_engines": [
            {"name": "engine-a", "devices": [0, 1], "port": 8000},
            {"name": "engine-b", "devices": [2, 3], "port": 8001},
        ],
    }
    hs = settings.load(data, "gpu1", ["gpu"])
    h = FakeHost("gpu1", {"ssh_hostname": "10.213.7.21"})
    a, b = (controller.target_for(h, hs, hs.verify, e) for e in hs.engine.engines)
    assert (a.name, a.base_url) == ("gpu1/engine-a", "http://10.213.7.21:8000")
    assert (b.name, b.base_url) == ("gpu1/engine-b", "http://10.213.7.21:8001")
    control = controller.SshControl(
        FakeInventory(h), {"gpu1/engine-b": ("gpu1", "vllm-engine-b.service")}
    )
    assert control.restart("gpu1/engine-b", 60) is None
    assert h.calls[0][0] == "timeout 60 systemctl restart vllm-engine-b.service"
    h.lines = ["1"]
    assert control.journal_has("gpu1/engine-b", 0, "x") is True
    assert h.calls[1][0].startswith("timeout 30 journalctl -u vllm-engine-b.service ")


def test_router_routes_reach_the_router_and_scrape_each_worker_as_verify_reaches_it():
    from test_router import IPS, hosts

    h = hosts()
    checked = SimpleNamespace(hosts=h)
    inv = FakeInventory(*(FakeHost(n, {"ssh_hostname": ip}) for n, ip in IPS.items()))
    by_engine = {
        (n, e.name): controller.target_for(inv.get_host(n), me, me.verify, e)
        for n, me in h.items()
        if me.is_inference
        for e in me.engine.engines
    }
    (route,) = controller.router_routes(checked, inv, by_engine)
    assert (route.router, route.url, route.name) == (
        "ceph1",
        "http://10.213.7.11:8100",
        "ceph1:8100",
    )
    assert (route.model, route.policy, route.health_interval) == (
        "Qwen/Qwen3-32B",
        "cache_aware",
        1,
    )
    # the router's URL for each engine, and the target verify.py scrapes for it
    assert [(url, t.name, t.base_url) for url, t in route.workers] == [
        ("http://10.213.7.31:8000", "gaudi1", "http://10.213.7.31:8000"),
        ("http://10.213.7.21:8000", "gpu1", "http://10.213.7.21:8000"),
        ("http://10.213.7.22:8000", "gpu2", "http://10.213.7.22:8000"),
    ]
    # a router bound to one address is reached there
    h["ceph1"] = hosts(kvceph_router_bind="10.213.7.99")["ceph1"]
    (route,) = controller.router_routes(SimpleNamespace(hosts=h), inv, by_engine)
    assert route.url == "http://10.213.7.99:8100"
