"""status.py's cluster read on a cephadm-managed RGW: the orchestrator's services, read through
the login's sudo (the cephadm lab's ceph1 read 'unreachable: TypeError' before this)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyinfra.api import Config, Inventory, State
from pyinfra.connectors.util import CommandOutput, OutputLine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inventories"))
import fake_facts  # noqa: E402

from deploys.status import collect  # noqa: E402


def test_cephadm_services_are_read_through_sudo(monkeypatch):
    me = fake_facts.Layout("fake_converged", converged=True).host_settings("@fake/ceph1")
    assert me.rgw.managed_by == "cephadm"
    inventory = Inventory(([("ceph1", {"ssh_user": "deploy", "_sudo": True})], {}))
    State(inventory, Config())  # gives the host its state, as a run does
    host = inventory.get_host("ceph1")
    ran = []

    def run_shell_command(command, **kwargs):
        ran.append((str(command), kwargs))
        listing = [{"service_name": "rgw.kvceph", "spec": {}, "status": {"running": 1}}]
        text = json.dumps(listing if " ls " in f" {command} " else [])
        return True, CommandOutput([OutputLine("stdout", text)])

    def get_fact(fact, **kwargs):
        return {"CephReachable": {"reachable": True}}.get(fact.__name__)

    monkeypatch.setattr(host, "run_shell_command", run_shell_command)
    monkeypatch.setattr(host, "get_fact", get_fact)
    out = collect.read_cluster(host, me)
    assert set(out["services"]) == set(collect.rgw_service_names(me))
    assert ran and all(kwargs == {"_sudo": True} for _, kwargs in ran), ran
