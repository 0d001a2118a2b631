"""The Ceph pools and RGW service stages, run for real by pyinfra's @local connector.

The cluster is conftest.py's ``local_ceph`` (a throwaway single-node Pacific on this machine,
shared with test_s3_local.py). Pools are created under a per-run prefix (``kvit-``; the S3 test
creates none of its own) and deleted afterwards (mon_allow_pool_delete); cluster-wide settings a
test changes are put back in a ``finally``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"
DEPLOY = """
import json, os, types
from pyinfra import host
from deploys import settings
from deploys.stages import {module}
data = json.loads(os.environ["KVCEPH_IT_DATA"])
me = settings.load(data, host.name, ["ceph_admin", "rgw"])
checked = types.SimpleNamespace(hosts={{host.name: me}})
{call}
"""

pytestmark = pytest.mark.integration


def _ceph(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["timeout", "30", "ceph", "--connect-timeout", "5", *args],
        capture_output=True,
        text=True,
        check=check,
    )


def _drop_pools(prefix: str) -> None:
    for pool in json.loads(_ceph("osd", "pool", "ls", "-f", "json").stdout):
        if pool.startswith(prefix):
            _ceph("osd", "pool", "rm", pool, pool, "--yes-i-really-really-mean-it", check=False)


@pytest.fixture(scope="module")
def cluster(local_ceph):
    """This module's pool prefix; CEPH_CONF points at the local cluster for the module only."""
    prefix = f"kvit-{uuid.uuid4().hex[:6]}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CEPH_CONF", local_ceph.conf)
        try:
            yield prefix
        finally:
            _drop_pools(prefix)


def _pyinfra(tmp_path: Path, module: str, call: str, data: dict, *flags: str):
    deploy = tmp_path / f"deploy_{module}.py"
    deploy.write_text(DEPLOY.format(module=module, call=call))
    env = dict(os.environ, PYTHONPATH=str(ROOT), KVCEPH_IT_DATA=json.dumps(data))
    env["PYINFRA_PROGRESS"] = "off"
    return subprocess.run(
        [str(PYINFRA), *flags, "@local", str(deploy)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # pyinfra logs to stderr; one stream keeps the order
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


def _totals(out: str) -> list[str]:
    """Grand total row of pyinfra's results: hosts, success (changed), error, no change."""
    line = next(x for x in out.splitlines() if x.strip().startswith("Grand total"))
    return line.split()[2:]


def _pools(prefix: str) -> dict:
    return {
        p["pool_name"]: p
        for p in json.loads(_ceph("osd", "pool", "ls", "detail", "-f", "json").stdout)
        if p["pool_name"].startswith(prefix)
    }


def _data(prefix: str, data_pg: int = 32, **extra) -> dict:
    return {
        "kvceph_lab": True,  # the throwaway local cluster: http, the lab's seed (issue 52 item 6)
        "kvceph_s3_endpoint_ip": "127.0.0.1",
        "kvceph_ceph_command_timeout": 30,
        "kvceph_ceph_pools": [
            {"name": f"{prefix}.data", "pg_num": data_pg, "size": 2, "min_size": 1},
            {"name": f"{prefix}.index", "pg_num": 8},
        ],
        **extra,
    }


POOLS = "ceph_pools.apply(me)"


def test_pools_created_then_converged(cluster, tmp_path):
    first = _pyinfra(tmp_path, "ceph_pools", POOLS, _data(cluster), "-y")
    assert first.returncode == 0, first.stdout
    pools = _pools(cluster)
    data = pools[f"{cluster}.data"]
    assert (data["pg_num_target"], data["size"], data["min_size"]) == (32, 2, 1)
    assert list(data["application_metadata"]) == ["rgw"]
    assert pools[f"{cluster}.index"]["pg_num_target"] == 8
    assert "min_size 1" in first.stdout  # the once-per-run warning

    second = _pyinfra(tmp_path, "ceph_pools", POOLS, _data(cluster), "-y")
    assert second.returncode == 0, second.stdout
    assert _totals(second.stdout) == ["3", "-", "-", "3"], second.stdout


def test_drift_is_fixed_safely(cluster, tmp_path):
    assert _pyinfra(tmp_path, "ceph_pools", POOLS, _data(cluster), "-y").returncode == 0
    pool = f"{cluster}.data"
    _ceph("osd", "pool", "set", pool, "min_size", "2")
    _ceph("osd", "pool", "application", "disable", pool, "rgw", "--yes-i-really-mean-it")
    run = _pyinfra(tmp_path, "ceph_pools", POOLS, _data(cluster), "-y")
    assert run.returncode == 0, run.stdout
    data = _pools(cluster)[pool]
    assert data["min_size"] == 1 and list(data["application_metadata"]) == ["rgw"]


def test_pg_decrease_refused_before_anything_changes(cluster, tmp_path):
    assert _pyinfra(tmp_path, "ceph_pools", POOLS, _data(cluster), "-y").returncode == 0
    data = _data(cluster, data_pg=16)
    data["kvceph_ceph_pools"].insert(0, {"name": f"{cluster}.new", "pg_num": 8})
    run = _pyinfra(tmp_path, "ceph_pools", POOLS, data, "-y")
    assert run.returncode != 0
    assert "refused: pg_num 32 -> 16 merges PGs" in run.stdout
    assert f"{cluster}.new" not in _pools(cluster)  # nothing ran, not even the other pool


def _global_option(name: str) -> str | None:
    """The value set in the mon config db's global section, None when not set there."""
    dump = json.loads(_ceph("config", "dump", "-f", "json").stdout)
    return next((o["value"] for o in dump if o["section"] == "global" and o["name"] == name), None)


def test_pg_budget_refused_instead_of_erange(cluster, tmp_path):
    # Cluster-wide: put back exactly what was there (set or unset), or the S3 test that shares
    # this cluster would create RGW's pools under a budget of 64.
    before = _global_option("mon_max_pg_per_osd")
    _ceph("config", "set", "global", "mon_max_pg_per_osd", "64")
    try:
        run = _pyinfra(tmp_path, "ceph_pools", POOLS, _data(cluster, data_pg=1024), "--dry")
    finally:
        if before is None:
            _ceph("config", "rm", "global", "mon_max_pg_per_osd")
        else:
            _ceph("config", "set", "global", "mon_max_pg_per_osd", before)
    assert _global_option("mon_max_pg_per_osd") == before
    out = run.stdout
    assert run.returncode != 0
    assert "PG budget:" in out and "ERANGE" in out and "Error ERANGE" not in out


def test_rgw_external_without_orchestrator_is_skipped(cluster, tmp_path):
    data = _data(cluster, kvceph_rgw_managed_by="external")
    run = _pyinfra(tmp_path, "rgw_service", "rgw_service.apply(me, checked)", data, "-y")
    assert run.returncode == 0, run.stdout
    assert "RGW service skipped" in run.stdout


def test_rgw_cephadm_without_orchestrator_fails_clearly(cluster, tmp_path):
    if _ceph("orch", "status", check=False).returncode == 0:
        # Only with KVCEPH_LOCAL_CEPH_CONF at a cephadm cluster: the fixture's has none.
        pytest.skip("this cluster has an orchestrator")
    data = _data(cluster, kvceph_rgw_managed_by="cephadm")
    run = _pyinfra(tmp_path, "rgw_service", "rgw_service.apply(me, checked)", data, "-y")
    assert run.returncode != 0
    assert "no orchestrator answers `ceph orch status`" in run.stdout


@pytest.fixture
def test_orchestrator(cluster):
    """Pacific's test_orchestrator mgr module: real `orch ls/host ls` output, no `orch apply`."""
    if _ceph("orch", "status", check=False).returncode == 0:
        # Only with KVCEPH_LOCAL_CEPH_CONF at a cephadm cluster: the fixture's has none.
        pytest.skip("this cluster has a real orchestrator; not replacing it")
    _ceph("mgr", "module", "enable", "test_orchestrator")
    _ceph("orch", "set", "backend", "test_orchestrator")

    def load(services: list[dict]) -> None:
        inventory = [
            {"name": "ceph1", "addr": "10.213.7.11", "labels": ["kvceph-rgw"], "devices": []},
            {"name": "ceph2", "addr": "10.213.7.12", "labels": [], "devices": []},
        ]
        status = {"created": "2026-01-01T00:00:00.000000", "running": 1, "size": 1}
        data = {"inventory": inventory, "daemons": []}
        data["services"] = [{**s, "status": status} for s in services]
        subprocess.run(
            ["timeout", "30", "ceph", "test_orchestrator", "load_data", "-i", "-"],
            input=json.dumps(data),
            text=True,
            check=True,
        )

    try:
        yield load
    finally:
        # Shared cluster: leave no orchestrator behind for the tests that expect none.
        _ceph("orch", "set", "backend", "", check=False)
        _ceph("mgr", "module", "disable", "test_orchestrator", check=False)


def test_rgw_spec_converged_and_drifted(test_orchestrator, cluster, tmp_path):
    from deploys import settings
    from deploys.stages import rgw_service

    data = _data(
        cluster, kvceph_rgw_managed_by="cephadm", kvceph_rgw_ingress_virtual_ip="10.67.67.100/24"
    )
    specs, _ = rgw_service.plan_specs(
        settings.load(data, "x", ["ceph_admin", "rgw"]).rgw,
        {"oldest": "16.2.15", "release": "pacific", "versions": ["16.2.15"]},
        # Pacific's dry run refuses the concentrator keys as 20.2.4 does: RGW + ingress.
        {"accepted": False, "rc": 0, "message": "refused"},
    )
    call = "rgw_service.apply(me, checked)"
    flags = ("-y", "--data", "kvceph_ceph_hostname=ceph1")

    test_orchestrator(specs)  # as if applied before: labels and both specs in place
    for spec in specs:  # ... by kvceph, which marks what it creates (deploys/cluster/ownership.py)
        name = spec.get("service_name") or f"{spec['service_type']}.{spec['service_id']}"
        subprocess.run(
            [
                "timeout",
                "60",
                "ceph",
                "config-key",
                "set",
                f"kvceph/owned/service/{name}",
                "created",
            ],
            check=True,
            capture_output=True,
        )
    run = _pyinfra(tmp_path, "rgw_service", call, data, *flags)
    assert run.returncode == 0, run.stdout
    assert _totals(run.stdout) == ["3", "-", "-", "3"], run.stdout

    specs[0]["placement"]["count_per_host"] = 2
    test_orchestrator(specs)
    run = _pyinfra(tmp_path, "rgw_service", call, data, *flags)
    # The drift is sent to the orchestrator; test_orchestrator cannot apply, cephadm would.
    assert "This Orchestrator does not support `orch apply`" in run.stdout
