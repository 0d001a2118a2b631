"""Stages 3-6 planned against fake facts: which operations they call, with arguments that bind
to the real operations' signatures, and the refusals that stop a run."""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from plan_secrets import plan_secrets  # noqa: E402
from pyinfra.api import DeployError

from deploys import paths, render
from deploys import settings as s
from deploys.operations.files import sha256_text
from deploys.settings.inventory import CacheGroup
from deploys.settings.reader import SettingsError
from deploys.settings.secrets import Secret
from deploys.stages import (
    engine_software,
    inference_config,
    readiness,
    tier_software,
    vllm_service,
)

CREDS = plan_secrets(vllm_api_key=Secret("plan-api-key"))
CHECKED = SimpleNamespace(credentials=CREDS, engine_count=3)
GLOBAL = {"name", "_serial", "_if", "_sudo"}


class Recorder:
    """Stands in for an operations module; checks every call against the real signature."""

    def __init__(self, module, calls):
        self.module, self.calls = module, calls

    def __getattr__(self, attr):
        op = getattr(self.module, attr)
        if inspect.isfunction(op) and not hasattr(op, "_inner"):
            return self._recording(op)  # a helper: the operations it calls are recorded
        if not hasattr(op, "_inner"):
            return op

        def call(*args, **kwargs):
            real = {k: v for k, v in kwargs.items() if k not in GLOBAL}
            bound = inspect.signature(op._inner).bind(*args, **real)
            bound.apply_defaults()  # what the operation gets, defaults included
            given = {**bound.arguments, **{k: v for k, v in kwargs.items() if k in GLOBAL}}
            self.calls.append((f"{self.module.__name__.rsplit('.', 1)[-1]}.{attr}", given))
            return SimpleNamespace(did_change=lambda: True)

        return call

    def _recording(self, fn):
        """``fn`` with this module's operations in its globals replaced by recorded calls, and
        its helpers by ones that record theirs (looked up when called: helpers call helpers)."""
        names = {k: getattr(self, k) for k, v in fn.__globals__.items() if hasattr(v, "_inner")}
        for k, v in fn.__globals__.items():
            if inspect.isfunction(v) and v.__module__ == self.module.__name__:
                names[k] = lambda *a, _name=k, **kw: getattr(self, _name)(*a, **kw)
        rebound = types.FunctionType(
            fn.__code__, {**fn.__globals__, **names}, fn.__name__, fn.__defaults__, fn.__closure__
        )
        rebound.__kwdefaults__ = fn.__kwdefaults__
        return rebound


class FakeHost:
    def __init__(self, facts):
        self.facts = facts

    def get_fact(self, cls, **kwargs):
        return self.facts[cls.__name__]


@pytest.fixture
def plan(monkeypatch):
    def run(stage, me, facts, *args):
        calls: list = []
        # The stage and the part it delegates to (engine software -> tier_software).
        parts = [stage, *(v for v in vars(stage).values() if v is tier_software)]
        for part in parts:
            for name, value in list(vars(part).items()):
                if isinstance(value, Recorder):  # a second plan in one test records anew
                    value = value.module
                if inspect.ismodule(value) and value.__name__.startswith(
                    ("pyinfra.operations", "deploys.operations")
                ):
                    monkeypatch.setattr(part, name, Recorder(value, calls))
            monkeypatch.setattr(part, "host", FakeHost(facts), raising=False)
        if hasattr(stage, "preflight"):
            checked = SimpleNamespace(
                credentials=CREDS,
                hosts={me.host: me},
                cache_groups=[CacheGroup(me.engine.model, 2, (me.host,))],
            )
            monkeypatch.setattr(stage.preflight, "run", lambda state, inventory: checked)
            monkeypatch.setattr(
                stage, "inventory", SimpleNamespace(get_host=lambda name: FakeHost(facts))
            )
        stage.apply._inner(me, *args)
        return calls

    return run


# The engine-software plans below without the connector's steps (LMCache's stock connector,
# pinned: kvceph's is the default); the tests of those steps set kvceph's.
STOCK = {"kvceph_lmcache_connector": "lmcache"}


def lab_host(**data):
    base = {
        **STOCK,
        "kvceph_s3_endpoint_ip": "10.0.0.5",
        "kvceph_accelerator_check": False,
        "kvceph_engine_profile": {
            "name": "lab-engine",
            "packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"],
            "executable": "kvceph-lab-engine",
            "vllm_version": "0.33.0",
        },
    }
    return s.load({**base, **data}, "gpu1", ("gpu",))


def names(calls):
    return [c[0] for c in calls]


# The engine as ServiceDrift reads it (the upgrade check reads it while the stage is prepared).
STOPPED = {"ServiceDrift": {"active": "inactive", "main_pid": 0, "env": {}}}


def _running(versions: str) -> dict:
    env = {"KVCEPH_ENGINE_VERSIONS": versions}
    return {"ServiceDrift": {"active": "active", "main_pid": 7, "env": env}}


def _wheelhouse(tmp_path):
    (tmp_path / "kvceph_lab_engine-0.1.0-py3-none-any.whl").write_text("")
    (tmp_path / "lmcache-0.5.6-cp311-cp311-manylinux_2_17_x86_64.whl").write_text("")


def test_engine_software_from_wheelhouse(plan, tmp_path):
    _wheelhouse(tmp_path)
    me = lab_host(kvceph_engine_wheelhouse=str(tmp_path))
    partial = {"EngineVersions": {"packages": {"kvceph-lab-engine": "0.1.0"}}}  # no lmcache
    calls = plan(engine_software, me, partial)
    assert names(calls) == [
        "engine.service_account",
        "files.directory",
        "engine.pruned_venvs",  # before the install: what no rollback needs
        "files.directory",
        "files.put",
        "files.put",
        "files.directory",
        "files.directory",
        "files.atomic_file",
        "engine.locked_venv",
        "connector.compiled_ops",  # NVIDIA host: read-only
        "engine.same_packages",  # after everything kvceph installs
    ]
    install = calls[-3][1]
    assert install["find_links"] == paths.WHEELHOUSE and install["index_url"] is None
    # The lock rendered from the wheelhouse: every wheel with its sha256, in a venv named by it.
    assert install["venv"] == me.engine.venv and install["venv"].startswith("/opt/kvceph/venv-")
    assert "lmcache==0.5.6 \\\n    --hash=sha256:e3b0c442" in install["lock_text"]
    assert calls[-4][1]["content"] == install["lock_text"]


def test_both_prunes_keep_this_runs_wheels_and_lock(plan, tmp_path):
    """The prune before the install and the one after the roll get the same arguments: the
    wheels this run uploads and the profile's lock stay, whatever the host held before."""
    _wheelhouse(tmp_path)
    me = lab_host(kvceph_engine_wheelhouse=str(tmp_path))
    calls = plan(engine_software, me, {"EngineVersions": {"packages": {}}})
    (before,) = (c[1] for c in calls if c[0] == "engine.pruned_venvs")
    assert before["when"] == "install" and before["venv"] == me.engine.venv
    assert before["upload"] == [
        "kvceph_lab_engine-0.1.0-py3-none-any.whl",
        "lmcache-0.5.6-cp311-cp311-manylinux_2_17_x86_64.whl",
    ]
    assert before["lock_text"] == me.engine.lock_text
    assert before["links"] == [me.engine.venv_link("vllm.service")]
    args = {k: v for k, v in before.items() if k not in ("name", "when")}
    assert args == {k: v for k, v in engine_software.prune_args(me).items()}


def test_the_builtin_nvidia_profile_installs_from_the_shipped_lock_via_the_index(plan):
    me = s.load({**STOCK, "kvceph_s3_endpoint_ip": "10.0.0.5"}, "gpu1", ("gpu",))
    calls = plan(engine_software, me, {"EngineVersions": {"packages": {}}})
    assert "files.put" not in names(calls)  # no wheelhouse: pip fetches from the index
    upload, install = (c for c in calls if c[0] in ("files.atomic_file", "engine.locked_venv"))
    shipped = (Path(__file__).resolve().parents[2] / "locks/nvidia.txt").read_text()
    assert upload[1]["content"] == install[1]["lock_text"] == shipped
    assert install[1]["find_links"] is None and install[1]["venv"] == me.engine.venv
    assert install[1]["lock_path"] == f"{paths.ENGINE_LOCK_DIR}/{Path(me.engine.venv).name}.txt"
    assert install[1]["name"].endswith("(locked: locks/nvidia.txt)")


def test_engine_software_skips_the_wheels_when_the_venv_has_every_pin(plan, tmp_path):
    _wheelhouse(tmp_path)
    me = lab_host(kvceph_engine_wheelhouse=str(tmp_path))
    have = {"EngineVersions": {"packages": {"kvceph-lab-engine": "0.1.0", "lmcache": "0.5.6"}}}
    calls = plan(engine_software, me, have)
    assert "files.put" not in names(calls)
    assert names(calls)[-3:] == [
        "engine.locked_venv",
        "connector.compiled_ops",
        "engine.same_packages",
    ]


def test_engine_software_installs_the_connector_only_when_the_venv_lacks_it(plan):
    from deploys.tier import connector_package

    wheel = connector_package.current()
    me = lab_host(kvceph_lmcache_connector="kvceph")
    have = {"EngineVersions": {"packages": {"kvceph-lab-engine": "0.1.0", "lmcache": "0.5.6"}}}
    missing = {**have, "ConnectorInstalled": {"version": None, "content": None}}
    calls = plan(engine_software, me, missing)
    tail = names(calls)[-5:-1]
    assert tail == ["files.directory", "files.put", "connector.installed", "connector.compiled_ops"]
    put = calls[-4][1]
    assert put["dest"] == wheel.host_path and put["src"].getvalue() == wheel.data


def test_engine_software_uploads_nothing_for_an_installed_connector(plan):
    from deploys.tier import connector_package

    wheel = connector_package.current()
    me = lab_host(kvceph_lmcache_connector="kvceph")
    have = {"EngineVersions": {"packages": {"kvceph-lab-engine": "0.1.0", "lmcache": "0.5.6"}}}
    installed = {**have, "ConnectorInstalled": {"version": wheel.version, "content": wheel.content}}
    calls = plan(engine_software, me, installed)
    assert "files.put" not in names(calls)
    assert names(calls)[-3:-1] == ["connector.installed", "connector.compiled_ops"]


def test_gaudi_hosts_skip_the_compiled_ops_check(plan):
    me = s.load(
        {**STOCK, "kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_engine_install": False},
        "g",
        ["gaudi"],
    )
    ok = {
        "EngineVersions": {"python": "3.12.3", "packages": {"vllm": "0.26.0", "lmcache": "0.5.6"}}
    }
    assert "connector.compiled_ops" not in names(plan(engine_software, me, ok))


def test_engine_software_image_mode_checks_installed_versions(plan):
    me = s.load(
        {**STOCK, "kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_engine_install": False}, "g", ["gpu"]
    )
    ok = {
        "EngineVersions": {"python": "3.12.3", "packages": {"vllm": "0.25.2", "lmcache": "0.5.6"}}
    }
    assert "engine.venv_packages" not in names(plan(engine_software, me, ok))
    bad = {"EngineVersions": {"packages": {"vllm": "0.26.0", "lmcache": "0.5.6"}}}
    with pytest.raises(DeployError, match="differs from the profile"):
        plan(engine_software, me, bad)


def test_inference_config_files_and_modes(plan, caplog):
    me = lab_host(kvceph_lmcache_lookup_timeout_ms=1)
    calls = plan(inference_config, me, {"CacheKeyInUse": {}}, CHECKED)
    by_name = {c[1]["name"]: c for c in calls}
    lmc = by_name["LMCache config /etc/kvceph/lmcache.yaml"][1]
    assert (lmc["user"], lmc["group"], lmc["mode"]) == ("root", "vllm", "0640")
    creds = by_name["AWS credentials /var/lib/vllm/.aws/credentials"]
    assert creds[0] == "files.private_file" and creds[1]["mode"] == "0600"
    assert repr(creds[1]["content"]) == "'***'"  # pyinfra may print args: masked
    aws_dir = by_name["AWS directory /var/lib/vllm/.aws"][1]
    assert aws_dir["mode"] == "0700"
    # The directory exists (0700) before the secret lands in it.
    order = [c[1]["name"] for c in calls]
    assert order.index("AWS directory /var/lib/vllm/.aws") < order.index(
        "AWS credentials /var/lib/vllm/.aws/credentials"
    )
    hosts = by_name["/etc/hosts entries for lmcache.s3.cephlab.com (1)"][1]
    assert [x.endswith("# kvceph") for x in hosts["lines"]] == [True]
    # An override below the derived timeout is named in the plan with LMCache's own words.
    assert "is still waiting for async lookup" in caplog.text
    assert "plan-secret-value" not in caplog.text


def test_vllm_service_rolls_in_batches_with_the_digest(plan, caplog):
    me = lab_host()
    calls = roll_ops(plan(vllm_service, me, {**STOPPED, "EngineUnits": ["vllm.service"]}, CHECKED))
    assert names(calls) == [
        "files.private_file",
        "files.directory",
        "files.atomic_file",
        "files.atomic_file",
        "files.atomic_file",
        "service.daemon_reload_if_stale",
        "service.enabled",
        "service.rolling_restart",
    ]
    env = calls[3][1]["content"]
    secrets_file = calls[0][1]
    # Root only (systemd reads it before dropping privileges); masked if pyinfra prints it.
    assert (secrets_file["user"], secrets_file["group"], secrets_file["mode"]) == (
        "root",
        "root",
        "0600",
    )
    assert repr(secrets_file["content"]) == "'***'"
    assert 'VLLM_API_KEY="plan-api-key"' in secrets_file["content"].reveal()
    roll = calls[-1][1]
    assert f'KVCEPH_DIGEST="{roll["digest"]}"' in env
    assert roll["digest"] == render.digest(me, CREDS.engine(me.engine.cache_group))
    # Not _serial: the roll's batches are kept by the operation (one engine at a time here).
    assert "_serial" not in roll and roll["batch"] == 1
    # Drift is judged against what this run writes: env values, and file hashes only.
    assert roll["environment"] == dict(render.environment(me, roll["digest"]))
    aws = render.aws_dir(me)
    assert roll["files"] == {
        paths.LMCACHE_PATH: sha256_text(render.lmcache_yaml(me)),
        f"{aws}/credentials": sha256_text(
            render.aws_credentials(me, CREDS.engine(me.engine.cache_group))
        ),
        f"{aws}/config": sha256_text(render.aws_config(me)),
        paths.ENV_PATH: sha256_text(env),
        paths.SECRETS_PATH: sha256_text(secrets_file["content"].reveal()),
        paths.UNIT_PATH: sha256_text(render.unit(me)),
        paths.GUARD_PATH: sha256_text(render.guard_module()),
    }
    # Secret variables by hash only: operation arguments can reach pyinfra's debug output.
    assert roll["secret_environment"] == {"VLLM_API_KEY": sha256_text("plan-api-key")}
    assert "plan-api-key" not in repr(roll)
    assert calls[4][1]["on_change"] == "timeout 120 systemctl daemon-reload"
    assert "accelerator check skipped" in caplog.text


TWO_ENGINES = {
    "kvceph_accelerator_count": 4,
    "kvceph_engines": [
        {"name": "engine-a", "devices": [0, 1], "port": 8000},
        {"name": "engine-b", "devices": [2, 3], "port": 8001},
    ],
    "kvceph_restart_batch": "67%",
}


VENV_OPS = {"engine.engine_link", "engine.pruned_venvs"}


def roll_ops(calls):
    """The vLLM stage's calls without its venv links and prune (tested on their own)."""
    return [
        (n, kw)
        for n, kw in calls
        if n not in VENV_OPS and not (n == "files.directory" and kw["path"].endswith("/engines"))
    ]


def test_venv_links_precede_the_units_and_the_prune_follows_the_roll(plan):
    me = lab_host()
    calls = plan(vllm_service, me, {**STOPPED, "EngineUnits": ["vllm.service"]}, CHECKED)
    order = names(calls)
    link = order.index("engine.engine_link")
    unit = next(i for i, (_, kw) in enumerate(calls) if kw.get("path") == paths.UNIT_PATH)
    assert link < unit and order[-1] == "engine.pruned_venvs"
    assert calls[link][1]["link"] == "/opt/kvceph/engines/vllm"
    roll = calls[-2][1]
    assert (roll["venv_link"], roll["venv"]) == ("/opt/kvceph/engines/vllm", me.engine.venv)
    assert calls[-1][1]["venv"] == me.engine.venv


def test_two_engines_get_a_unit_each_and_the_old_unit_goes_before_any_restart(plan):
    me = lab_host(**TWO_ENGINES)
    calls = roll_ops(plan(vllm_service, me, {**STOPPED, "EngineUnits": ["vllm.service"]}, CHECKED))
    ops = [(n, kw.get("path") or kw.get("unit")) for n, kw in calls]
    assert ops[3:] == [
        ("files.atomic_file", "/etc/kvceph/vllm-engine-a.env"),
        ("files.atomic_file", "/etc/systemd/system/vllm-engine-a.service"),
        ("service.daemon_reload_if_stale", "vllm-engine-a.service"),
        ("service.enabled", "vllm-engine-a.service"),
        ("files.atomic_file", "/etc/kvceph/vllm-engine-b.env"),
        ("files.atomic_file", "/etc/systemd/system/vllm-engine-b.service"),
        ("service.daemon_reload_if_stale", "vllm-engine-b.service"),
        ("service.enabled", "vllm-engine-b.service"),
        # Today's single engine held every device and port 8000: stopped before the new ones.
        ("service.removed", "vllm.service"),
        ("service.rolling_restart", "vllm-engine-a.service"),
        ("service.rolling_restart", "vllm-engine-b.service"),
    ]
    removed = calls[-3][1]
    assert removed["files"] == [
        "/etc/systemd/system/vllm.service",
        "/etc/kvceph/vllm.env",
        "/opt/kvceph/engines/vllm",  # its venv link: it would keep its venv from every prune
    ]
    assert "no longer in kvceph_engines" in removed["name"]
    a, b = calls[-2][1], calls[-1][1]
    assert (a["port"], b["port"]) == (8000, 8001)
    assert a["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert b["environment"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert a["digest"] != b["digest"]
    # 67% of the inventory's 3 engines: 2 at a time.
    assert a["batch"] == b["batch"] == 2
    # Shared files are the same for both; each engine has its own env file and unit.
    assert "/etc/kvceph/vllm.env" not in a["files"]
    assert a["files"]["/etc/kvceph/lmcache.yaml"] == b["files"]["/etc/kvceph/lmcache.yaml"]


def test_a_removed_engine_goes_and_only_that_one(plan):
    me = lab_host(**TWO_ENGINES)
    units = ["vllm-engine-a.service", "vllm-engine-b.service", "vllm-engine-c.service"]
    calls = roll_ops(plan(vllm_service, me, {**STOPPED, "EngineUnits": units}, CHECKED))
    removed = [kw["unit"] for n, kw in calls if n == "service.removed"]
    assert removed == ["vllm-engine-c.service"]
    converged = plan(vllm_service, me, {**STOPPED, "EngineUnits": units[:2]}, CHECKED)
    assert converged, "the second plan recorded nothing"
    assert "service.removed" not in names(converged)


def test_an_unchanged_profile_rolls_with_a_drain_and_labels_the_versions(plan):
    facts = {**_running("vllm=0.33.0 lmcache=0.5.6"), "EngineUnits": ["vllm.service"]}
    calls = roll_ops(plan(vllm_service, lab_host(), facts, CHECKED))
    assert not any(n.startswith("service.stopped") for n in names(calls))
    roll = calls[-1][1]
    assert roll["environment"]["KVCEPH_ENGINE_VERSIONS"] == "vllm=0.33.0 lmcache=0.5.6"
    assert roll["drain_timeout"] == 120  # the gate is on: the restart drains first


def test_a_patch_release_rolls_and_says_the_keys_stay_valid(plan, caplog):
    facts = {**_running("vllm=0.33.0 lmcache=0.5.6"), "EngineUnits": ["vllm.service"]}
    patch = lab_host(kvceph_engine_profile={
        "name": "lab-engine", "packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"],
        "executable": "kvceph-lab-engine", "vllm_version": "0.33.1"})  # fmt: skip
    with caplog.at_level("INFO"):
        calls = roll_ops(plan(vllm_service, patch, facts, CHECKED))
    assert names(calls)[-1] == "service.rolling_restart"
    assert not any(n.startswith("service.stopped") for n in names(calls))
    assert "gpu1 vllm.service: vLLM 0.33.0 -> 0.33.1, LMCache 0.5.6: the object keys stay" in (
        caplog.text
    )


ON_026 = {**_running("vllm=0.26.0 lmcache=0.5.6"), "EngineUnits": ["vllm.service"]}


def test_another_minor_rolls_in_its_batch_and_says_what_it_costs(plan, caplog):
    # No stop of the group first: the new scheme's seed keeps old and new names apart.
    with caplog.at_level("INFO"):
        calls = roll_ops(plan(vllm_service, lab_host(), ON_026, CHECKED))
    assert names(calls)[-1] == "service.rolling_restart"
    assert not any(n.startswith("service.stopped") for n in names(calls))
    roll = calls[-1][1]
    assert (roll["batch"], roll["drain_timeout"]) == (1, 120)
    assert (
        "gpu1 vllm.service: vLLM 0.26.0 -> 0.33.0, LMCache 0.5.6: the object keys change "
        "(chunk hash vLLM 0.26.x get_hash_fn_by_name + init_none_hash -> vLLM 0.33.x "
        "get_hash_fn_by_name + init_none_hash): the new engines hash with key scheme "
        "vllm-0.33/lmcache-0.5.6's own seed, old and new names cannot collide, the group "
        "rolls in its batches; the new scheme starts with an empty tier (misses until its "
        "engines wrote each prefix once), the old objects in bucket lmcache age out through "
        "the lifecycle rule (7 days)"
    ) in caplog.text


def test_the_retired_opt_in_is_refused_in_one_line():
    with pytest.raises(SettingsError) as exc:
        lab_host(kvceph_upgrade_cold_cache=True)
    assert str(exc.value) == (
        "gpu1: kvceph_upgrade_cold_cache = True: is retired: an upgrade that changes the "
        "object keys rolls like any change, each key scheme hashing with its own seed "
        '(docs/design.md "Engine upgrades across a cache group"); fix: remove it'
    )


def test_vllm_service_refuses_the_wrong_accelerator(plan):
    me = s.load({"kvceph_s3_endpoint_ip": "10.0.0.5"}, "gaudi1", ["gaudi"])
    nvidia = {
        "nvidia": {"pci_devices": 8, "tool": True},
        "gaudi": {"pci_devices": 0, "tool": False},
    }
    with pytest.raises(DeployError, match="group promises gaudi"):
        plan(vllm_service, me, {"Accelerators": nvidia}, CHECKED)


def test_readiness_is_one_read_only_check(plan):
    calls = plan(readiness, lab_host(), {})
    assert names(calls) == ["service.ready", "connector.remote_tier_present"]
    assert calls[0][1]["model"] == "Qwen/Qwen3-32B"
    assert calls[1][1] == {
        "name": "Engine on port 8000 has its remote (S3) tier",
        "unit": "vllm.service",
        "connector": "lmcache",
    }


def test_readiness_checks_every_engine(plan):
    calls = plan(readiness, lab_host(**TWO_ENGINES), {})
    assert [kw["port"] for n, kw in calls if n == "service.ready"] == [8000, 8001]
    units = [kw["unit"] for n, kw in calls if n == "connector.remote_tier_present"]
    assert len(units) == 2 and len(set(units)) == 2


def test_builtin_hash_needs_one_python_minor_per_cache_group():
    me = s.load(
        {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_lmcache_hash_algorithm": "builtin"},
        "a",
        ["gpu"],
    )
    group = CacheGroup(me.engine.model, 2, ("a", "b"))
    checked = SimpleNamespace(cache_groups=[group])
    pythons = {"a": "3.11.2", "b": "3.12.3"}
    error = engine_software.python_minor_error(me, checked, pythons.get)
    assert "Python minors differ (a=3.11, b=3.12)" in error
    pythons["b"] = "3.11.9"
    assert engine_software.python_minor_error(me, checked, pythons.get) is None
    sha = s.load({"kvceph_s3_endpoint_ip": "10.0.0.5"}, "a", ["gpu"])
    assert engine_software.python_minor_error(sha, checked, {"a": "3.11", "b": "3.12"}.get) is None


def test_engine_software_reads_pythons_only_for_builtin_hash(plan):
    me = lab_host(kvceph_lmcache_hash_algorithm="builtin")
    facts = {"EngineVersions": {"python": "3.11.2", "packages": {}}}
    assert "engine.venv_packages" in names(plan(engine_software, me, facts))


# --- MP mode (kvceph_engine_preset vllm-0.34-mp): the server unit beside the engines ----------


def mp_host(**data):
    base = {
        "kvceph_s3_endpoint_ip": "10.0.0.5",
        "kvceph_accelerator_check": False,
        "kvceph_engine_preset": "vllm-0.34-mp",
        "kvceph_accept_mp_serve_defect": True,  # its real pair cannot serve yet (loan 12)
    }
    return s.load({**base, **data}, "gpu1", ("gpu",))


def test_mp_writes_and_starts_the_server_before_the_engines_roll(plan):
    me = mp_host()
    calls = roll_ops(plan(vllm_service, me, {**STOPPED, "EngineUnits": ["vllm.service"]}, CHECKED))
    order = names(calls)
    server = next(kw for n, kw in calls if kw.get("path") == paths.MP_UNIT_PATH)
    assert server["content"] == render.mp_server_unit(me)
    assert (server["user"], server["group"], server["mode"]) == ("root", "root", "0644")
    assert server["on_change"].endswith(f"systemctl try-restart {paths.MP_UNIT_NAME}")
    start = next(i for i, (n, kw) in enumerate(calls) if n == "systemd.service")
    assert calls[start][1]["service"] == paths.MP_UNIT_NAME and calls[start][1]["running"]
    assert start < order.index("service.rolling_restart")
    assert not any(n == "service.removed" for n in order)


def test_back_in_process_the_server_unit_goes(plan):
    me = lab_host()
    units = ["lmcache-server.service", "vllm.service"]
    calls = roll_ops(plan(vllm_service, me, {**STOPPED, "EngineUnits": units}, CHECKED))
    removed = [kw for n, kw in calls if n == "service.removed"]
    assert [(r["unit"], r["files"]) for r in removed] == [
        (paths.MP_UNIT_NAME, [paths.MP_UNIT_PATH])
    ]
    assert not any(kw.get("path") == paths.MP_UNIT_PATH for _, kw in calls)


def test_moving_to_mp_says_the_group_starts_cold_even_on_the_same_vllm(plan, caplog):
    # 0.25.1 in process -> 0.25.1 in MP: same versions, other object names.
    me = mp_host(kvceph_engine_profile={"vllm_version": "0.25.1", "packages": ["vllm==0.25.1"]})
    facts = {**_running("vllm=0.25.1 lmcache=0.5.6"), "EngineUnits": ["vllm.service"]}
    with caplog.at_level("INFO"):
        plan(vllm_service, me, facts, CHECKED)
    assert (
        "gpu1 vllm.service: vLLM 0.25.1 -> 0.25.1, LMCache 0.5.6, in-process -> MP: the object "
        "names change"
    ) in caplog.text
    assert "the new engines start with an empty tier" in caplog.text
    # the MP engine says which mode it runs: a later plan sees no move
    env = dict(render.environment(me))
    assert env["KVCEPH_ENGINE_VERSIONS"] == "vllm=0.25.1 lmcache=0.5.6 mode=mp"
    caplog.clear()
    with caplog.at_level("INFO"):
        plan(vllm_service, me, {**facts, **_running(env["KVCEPH_ENGINE_VERSIONS"])}, CHECKED)
    assert "in-process -> MP" not in caplog.text


# --- The roll between in-process and MP (issue 51 item 2) --------------------------------------

IN_PROCESS_0251 = "vllm=0.25.1 lmcache=0.5.6"


def _plan_lines(caplog) -> list[str]:
    said = [r.getMessage() for r in caplog.records]
    return [x for x in said if x.startswith("kvceph: ") and "accelerator check" not in x]


def test_the_roll_to_mp_writes_the_server_first_and_says_both_namespaces_are_live(plan, caplog):
    me = mp_host()
    facts = {**_running(IN_PROCESS_0251), "EngineUnits": ["vllm.service"]}
    with caplog.at_level("INFO"):
        calls = roll_ops(plan(vllm_service, me, facts, CHECKED))
    order = names(calls)
    assert order.index("systemd.service") < order.index("service.rolling_restart")
    assert "service.removed" not in order
    roll = next(kw for n, kw in calls if n == "service.rolling_restart")
    assert roll["batch"] == 1 and roll["drain_timeout"] == me.engine.drain_timeout
    assert _plan_lines(caplog) == [
        "kvceph: gpu1 vllm.service: vLLM 0.25.1 -> 0.34.0, LMCache 0.5.6, in-process -> MP: "
        "the object names change (LMCache's MP server names objects <prefix><model>@<kv_rank>"
        "@<group>@<blake3 hash>, in-process engines <model>@<world size>@<worker>@<hash>@"
        "<dtype>, and kvceph's MP prefix carries the vLLM minor): the group rolls in its "
        "batches; the new engines start with an empty tier, the old objects in bucket lmcache "
        "age out through the lifecycle rule (7 days)",
        "kvceph: gpu1: lmcache-server.service is written and started before any engine "
        "restarts; its engines then restart 1 at a time in the run's roll, each drained first "
        "(kvceph_restart_batch, kvceph_drain_timeout); an engine not yet restarted keeps "
        "serving in process meanwhile",
        "kvceph: gpu1: until the cache group's last engine rolled, in-process and MP engines "
        "serve side by side: both namespaces are live, the in-process names and the MP names "
        f"({render.mp_prefix(me)}...); neither side reads the other's objects, so each "
        "starts a prompt cold the first time it sees it",
    ]


def test_the_rollback_removes_the_server_after_the_engines_rolled_and_says_so(plan, caplog):
    me = s.load(
        {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_accelerator_check": False}, "gpu1", ("gpu",)
    )
    units = [paths.MP_UNIT_NAME, "vllm.service"]
    facts = {**_running("vllm=0.34.0 lmcache=0.5.6 mode=mp"), "EngineUnits": units}
    with caplog.at_level("INFO"):
        calls = roll_ops(plan(vllm_service, me, facts, CHECKED))
    order = names(calls)
    removed = order.index("service.removed")
    assert order.index("service.rolling_restart") < removed == len(order) - 1
    assert calls[removed][1]["unit"] == paths.MP_UNIT_NAME
    assert calls[removed][1]["files"] == [paths.MP_UNIT_PATH]
    assert not any(kw.get("path") == paths.MP_UNIT_PATH for _, kw in calls)  # not rewritten
    lines = _plan_lines(caplog)
    assert (
        "vLLM 0.34.0 -> 0.25.1, LMCache 0.5.6, MP -> in-process: the object names change"
        in (lines[0])
    )
    assert lines[1] == (
        "kvceph: gpu1: lmcache-server.service stays until the host's engines are back in "
        "process (they restart 1 at a time in the run's roll, each drained first "
        "(kvceph_restart_batch, kvceph_drain_timeout); an MP engine needs the server until its "
        "turn), then it is removed; the MP objects (names ending @mp-lmcache<version>/) are not "
        "read again and age out through the lifecycle rule"
    )
    assert "both namespaces are live" in lines[2]


def test_two_engines_roll_to_mp_one_batch_at_a_time_after_one_server(plan, caplog):
    me = mp_host(**TWO_ENGINES)
    units = ["vllm-engine-a.service", "vllm-engine-b.service"]
    facts = {**_running(IN_PROCESS_0251), "EngineUnits": units}
    with caplog.at_level("INFO"):
        calls = roll_ops(plan(vllm_service, me, facts, CHECKED))
    order = names(calls)
    starts = [i for i, n in enumerate(order) if n == "systemd.service"]
    rolls = [i for i, n in enumerate(order) if n == "service.rolling_restart"]
    assert len(starts) == 1 and len(rolls) == 2 and starts[0] < rolls[0]
    assert {calls[i][1]["batch"] for i in rolls} == {2}  # 67% of the run's 3 engines
    lines = _plan_lines(caplog)
    assert sum("in-process -> MP" in x for x in lines) == 2  # one per engine
    assert sum("is written and started before any engine restarts" in x for x in lines) == 1


def test_a_converged_mp_host_says_nothing_of_a_roll(plan, caplog):
    me = mp_host()
    env = dict(render.environment(me))["KVCEPH_ENGINE_VERSIONS"]
    facts = {**_running(env), "EngineUnits": [paths.MP_UNIT_NAME, "vllm.service"]}
    with caplog.at_level("INFO"):
        calls = roll_ops(plan(vllm_service, me, facts, CHECKED))
    assert _plan_lines(caplog) == []
    assert "service.removed" not in names(calls)


def _mp_host():
    return s.load(
        {
            "kvceph_s3_endpoint_ip": "10.0.0.5",
            "kvceph_engine_preset": "vllm-0.34-mp",
            "kvceph_accept_mp_serve_defect": True,
        },
        "gpu1",
        ("gpu",),
    )


@pytest.mark.parametrize("kvceph_wrote", [True, False])
def test_mp_writes_no_lmcache_yaml_and_removes_only_kvcephs_old_one(plan, kvceph_wrote):
    me = _mp_host()
    facts = {"CacheKeyInUse": {}, "KvcephWroteFile": kvceph_wrote}
    calls = plan(inference_config, me, facts, CHECKED)
    assert not any(c[1].get("name") == "LMCache config /etc/kvceph/lmcache.yaml" for c in calls)
    removed = [c for c in calls if c[1].get("path") == paths.LMCACHE_PATH]
    if kvceph_wrote:
        assert [(c[0], c[1]["present"]) for c in removed] == [("files.file", False)]
    else:  # the operator's own file (no kvceph marker) stays
        assert removed == []
    assert paths.LMCACHE_PATH not in vllm_service.shared_files_desired(me, CHECKED)
    assert "LMCACHE_CONFIG_FILE" not in render.env_file(me, "0" * 64)


def test_the_fact_tells_kvcephs_file_from_the_operators():
    from deploys.facts.engine import KvcephWroteFile

    fact = KvcephWroteFile()
    assert "/etc/kvceph/lmcache.yaml" in str(fact.command("/etc/kvceph/lmcache.yaml"))
    assert fact.process(["yes"]) is True and fact.process([]) is False
