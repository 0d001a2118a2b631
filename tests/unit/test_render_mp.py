"""MP mode (kvceph_engine_preset vllm-0.34-mp): the lmcache-server unit and the vLLM unit beside
it, checked by their consumers: ``systemd-analyze verify`` and LMCache 0.5.6's own ``lmcache
server`` argument parser and L2 factory (the connector venv, which has torch)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from deploys import paths, render
from deploys import settings as s
from deploys.engine import versions
from deploys.settings.reader import SettingsError
from deploys.tier import kv_sizing

ROOT = Path(__file__).resolve().parents[2]
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
# the preset's real pair cannot serve (MP_SERVE_DEFECTS, loan 12): what it renders is still tested
MP = {**BASE, "kvceph_engine_preset": "vllm-0.34-mp", "kvceph_accept_mp_serve_defect": True}
_SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
# host()'s namespace in MP (deploys/settings/namespace.py, mode field last).
MP_NAMESPACE = "kv/Qwen%2FQwen3-32B@tp2@pp1@-@bfloat16@c256@kv-packed@naive@none@mp-lmcache0.5/"


def host(**data):
    return s.load({**MP, **data}, "gpu1", ("gpu",))


def argv_of(unit_text: str, directive: str = "ExecStart") -> list[str]:
    """A directive's words as systemd reads them (single quotes, doubled % and $)."""
    line = next(x for x in unit_text.splitlines() if x.startswith(f"{directive}="))
    words = shlex.split(line.split("=", 1)[1])
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_preset_is_selectable_and_not_the_default():
    default = s.load(BASE, "gpu1", ("gpu",)).engine.profile
    assert (default.mode, default.vllm_version, default.preset) == ("inprocess", "0.25.1", "")
    me = host()
    p = me.engine.profile
    assert (p.mode, p.vllm_version, p.lmcache_version, p.preset) == (
        "mp",
        "0.34.0",
        "0.5.6",
        "vllm-0.34-mp",
    )
    # installed from the shipped, hash-locked tree
    assert me.engine.lock_source == "locks/vllm-0.34-mp.txt"


def test_in_process_files_are_unchanged_by_mp():
    me = s.load(BASE, "gpu1", ("gpu",))
    unit = render.unit(me)
    assert "LMCacheMPConnector" not in unit and "ExecStartPre" not in unit
    assert "lmcache-server" not in unit
    assert ("LMCACHE_CONFIG_FILE", paths.LMCACHE_PATH) in render.environment(me)


def test_server_unit_is_loopback_hardened_and_sized_from_the_host():
    me = host()
    unit = render.mp_server_unit(me)
    argv = argv_of(unit)
    assert argv[:2] == [f"{me.engine.venv}/bin/lmcache", "server"]
    assert flag(argv, "--host") == flag(argv, "--http-host") == "127.0.0.1"
    assert flag(argv, "--port") == "5555" and flag(argv, "--http-port") == "8090"
    assert flag(argv, "--hash-algorithm") == "blake3"
    assert flag(argv, "--eviction-policy") == "LRU"
    assert flag(argv, "--chunk-size") == str(me.lmcache.chunk_size)
    assert flag(argv, "--worker-reap-timeout-seconds") == "60"
    assert flag(argv, "--worker-registration-grace-seconds") == "300"
    per_worker = kv_sizing.limits(me).max_local_cpu_size
    assert float(flag(argv, "--l1-size-gb")) == pytest.approx(per_worker * 2)  # TP 2, 1 engine
    lines = unit.splitlines()
    for line in (
        "Environment=LMCACHE_TRACK_USAGE=false",
        "Environment=DO_NOT_TRACK=1",
        "LimitMEMLOCK=infinity",
        "Restart=always",
        f"User={me.engine.service_user}",
        f"Group={me.engine.service_user}",
    ):
        assert line in lines
    # CUDA IPC between the engines and the server: none of these
    for banned in ("PrivateIPC=", "PrivateDevices=", "DevicePolicy="):
        assert not any(x.startswith(banned) for x in lines)


def test_the_l2_adapter_is_kvcephs_plugin_with_no_secret():
    me = host()
    spec = json.loads(flag(argv_of(render.mp_server_unit(me)), "--l2-adapter"))
    assert spec == {
        "type": "native_plugin",
        "shared": True,
        "module_path": "kvceph_connector.lmcache_mp",
        "class_name": "KvcephMPConnector",
        "adapter_params": {
            "endpoint": me.s3.remote_url.removeprefix("s3://"),
            "region": me.s3.region,
            "tls": not me.s3.disable_tls,
            "connections": me.lmcache.tier.connections,
            "timeout_s": me.lmcache.tier.timeout_s,
            "verify_crc32c": me.lmcache.tier.verify_crc32c,
            "namespace": MP_NAMESPACE,
            # A chunk of one worker: 256 tokens x the per-worker KV bytes of the model table.
            "object_bytes": 256 * me.lmcache.kv_bytes_per_token,
        },
    }
    text = render.mp_server_unit(me).lower()
    for word in ("secret", "access_key", "password", "token"):
        assert word not in text


def test_the_namespace_follows_the_kv_dtype_and_the_vllm_minor():
    assert "@fp8@" in render.mp_prefix(host(kvceph_kv_dtype="fp8"))
    old = host(kvceph_engine_profile={"vllm_version": "0.25.1", "packages": ["vllm==0.25.1"]})
    assert "@kv-split@" in render.mp_prefix(old)
    assert "@kv-packed@" in render.mp_prefix(host())


def test_no_object_bytes_with_a_pipeline_split():
    me = host(kvceph_engine_profile={"extra_args": ["--pipeline-parallel-size", "2"]})
    params = json.loads(flag(argv_of(render.mp_server_unit(me)), "--l2-adapter"))
    assert "object_bytes" not in params["adapter_params"]


def test_one_server_for_every_engine_of_the_host():
    engines = [
        {"name": "a", "devices": [0, 1], "port": 8000},
        {"name": "b", "devices": [2, 3], "port": 8001},
    ]
    me = host(kvceph_engines=engines, kvceph_accelerator_count=4)
    argv = argv_of(render.mp_server_unit(me))
    per_worker = kv_sizing.limits(me).max_local_cpu_size
    assert float(flag(argv, "--l1-size-gb")) == pytest.approx(per_worker * 4)
    assert flag(argv, "--max-gpu-workers") == "4"
    assert "Environment=CUDA_VISIBLE_DEVICES=0,1,2,3" in render.mp_server_unit(me).splitlines()


def test_vllm_unit_uses_the_mp_connector_after_the_server():
    me = host()
    unit = render.unit(me)
    argv = argv_of(unit)
    config = json.loads(flag(argv, "--kv-transfer-config"))
    assert config == {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {
            "lmcache.mp.host": "tcp://127.0.0.1",
            "lmcache.mp.port": 5555,
        },
    }
    assert "kv_connector_module_path" not in config
    assert "--no-enable-extensible-kv-cache" in argv
    lines = unit.splitlines()
    assert f"Wants={paths.MP_UNIT_NAME}" in lines and f"After={paths.MP_UNIT_NAME}" in lines
    wait = argv_of(unit, "ExecStartPre")
    assert wait[1:] == [
        "-m",
        "kvceph_connector.healthcheck",
        "http://127.0.0.1:8090/healthcheck",
        "360",
        "0",  # the host's only engine: while it is down, any registration is a dead one of its
    ]
    assert wait[0].rsplit("/bin/", 1)[0] == argv[0].rsplit("/bin/", 1)[0]  # ExecStart's venv
    # the server reads no lmcache.yaml: nothing points the engine at one
    assert "LMCACHE_CONFIG_FILE" not in dict(render.environment(me))


def test_vllm_025_in_mp_has_no_extensible_kv_flag():
    me = host(kvceph_engine_profile={"vllm_version": "0.25.1", "packages": ["vllm==0.25.1"]})
    assert "--no-enable-extensible-kv-cache" not in render.exec_start(me)
    assert render.kv_transfer_config(me)["kv_connector"] == versions.MP_CONNECTOR


@pytest.mark.parametrize(
    ("data", "groups", "words"),
    [
        ({"kvceph_engine_preset": "vllm-9-mp"}, ("gpu",), "no such built-in profile"),
        ({}, ("gaudi",), "is not a profile for gaudi hosts"),
        (
            {"kvceph_engine_preset": None, "kvceph_engine_profile": {"mode": "mp"}},
            ("gaudi",),
            "no path for gaudi",
        ),
        ({"kvceph_engine_profile": {"mode": "sideways"}}, ("gpu",), "unknown engine mode"),
        (
            {"kvceph_engine_profile": {"vllm_version": "0.33.0", "packages": ["vllm==0.33.0"]}},
            ("gpu",),
            "MP mode not read for this pair",
        ),
        ({"kvceph_lmcache_connector": "lmcache"}, ("gpu",), "renders only kvceph's S3 core"),
    ],
)
def test_mp_refusals_are_one_line(data, groups, words):
    merged = {k: v for k, v in {**MP, **data}.items() if v is not None}
    with pytest.raises(SettingsError) as err:
        s.load(merged, "h1", groups)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_034_preset_is_refused_while_its_pair_cannot_serve():
    data = {k: v for k, v in MP.items() if k != "kvceph_accept_mp_serve_defect"}
    with pytest.raises(SettingsError) as err:
        s.load(data, "gpu1", ("gpu",))
    line = str(err.value)
    assert "\n" not in line and "kvceph_engine_preset" in line and "resumed_req_ids" in line
    assert "loan12" in line and "kvceph_accept_mp_serve_defect = True" in line
    # the lab engine's profile (no real vLLM package) models the pair and is not refused
    lab = {"packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"], "executable": "x"}
    assert s.load({**data, "kvceph_engine_profile": lab}, "gpu1", ("gpu",)).engine.profile.mp
    # 0.25 in MP has no known serve defect
    v025 = {"vllm_version": "0.25.1", "packages": ["vllm==0.25.1"]}
    assert s.load({**data, "kvceph_engine_profile": v025}, "gpu1", ("gpu",)).engine.profile.mp


def test_in_process_034_stays_refused_for_the_kv_defect():
    with pytest.raises(SettingsError, match="#4463"):
        s.load(
            {
                **BASE,
                "kvceph_engine_profile": {"vllm_version": "0.34.0", "packages": ["vllm==0.34.0"]},
            },
            "gpu1",
            ("gpu",),
        )


# --- Recovery without an operator (issue 51 item 1) ---------------------------------------------


def _directive(unit_text: str, name: str) -> str:
    return next(x for x in unit_text.splitlines() if x.startswith(f"{name}=")).split("=", 1)[1]


def test_a_crashed_engine_waits_until_the_server_dropped_its_dead_workers():
    # LMCache's reaper scans every reap/4 s: a worker that never pinged (died in warm-up) is
    # gone by grace + reap/4; the wait covers that, and the start timeout covers the wait.
    me = host()
    unit = render.unit(me)
    wait_s = float(argv_of(unit, "ExecStartPre")[4])
    assert wait_s >= render.MP_REGISTRATION_GRACE_S + render.MP_REAP_TIMEOUT_S / 4
    assert int(_directive(unit, "TimeoutStartSec")) > wait_s
    assert _directive(unit, "Restart") == "always"
    # an in-process engine keeps its own budget
    plain = s.load({**BASE, "kvceph_health_timeout": 60}, "gpu1", ("gpu",))
    assert _directive(render.unit(plain), "TimeoutStartSec") == "60"
    short = host(kvceph_health_timeout=60)
    assert int(_directive(render.unit(short), "TimeoutStartSec")) > wait_s


def test_with_two_engines_each_allows_the_others_workers():
    engines = [
        {"name": "a", "devices": [0, 1], "port": 8000},
        {"name": "b", "devices": [2, 3], "port": 8001},
    ]
    me = host(kvceph_engines=engines, kvceph_accelerator_count=4)
    for one in me.engine.engines:
        assert argv_of(render.unit(me, one), "ExecStartPre")[-1] == "2"  # TP 2 x 1 other


def test_a_restarted_server_is_away_long_enough_for_every_engine_to_notice():
    # LMCache #4642: a restart shorter than a heartbeat is never noticed, so the engines do
    # not register again. ExecStopPost runs after a crash as well as a stop.
    unit = render.mp_server_unit(host())
    pause = float(argv_of(unit, "ExecStopPost")[1])
    away = pause + float(_directive(unit, "RestartSec"))
    assert away > 2 * render.MP_HEARTBEAT_S
    # ... and within systemd's stop budget, which ExecStopPost runs under
    assert pause < float(_directive(unit, "TimeoutStopSec"))
    # the engines are not bound to it: a server crash does not take them down
    engine = render.unit(host()).splitlines()
    assert not any(x.startswith(("BindsTo=", "PartOf=", "Requires=")) for x in engine)


# --- systemd-analyze verify ---------------------------------------------------------------------


def _stub(root: Path, exe: str) -> None:
    path = root / exe.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)


@pytest.mark.skipif(_SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")
def test_both_units_pass_systemd_analyze_verify(systemd_root):
    me = host()
    server, engine = render.mp_server_unit(me), render.unit(me)
    (systemd_root / paths.MP_UNIT_PATH.lstrip("/")).write_text(server)
    (systemd_root / paths.UNIT_PATH.lstrip("/")).write_text(engine)
    pause = argv_of(server, "ExecStopPost")[0]  # /bin/sleep: on every host, not in the root
    for exe in (argv_of(server)[0], argv_of(engine)[0], argv_of(engine, "ExecStartPre")[0], pause):
        _stub(systemd_root, exe)
    done = subprocess.run(
        [
            _SYSTEMD_ANALYZE,
            "verify",
            "--man=no",
            f"--root={systemd_root}",
            paths.MP_UNIT_PATH,
            paths.UNIT_PATH,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr


# --- LMCache's own parser and factory -------------------------------------------------------------


def _connector_python() -> str | None:
    """The connector venv's python (LMCache 0.5.6 + CPU torch): ``$KVCEPH_CONNECTOR_PYTHON``
    (make sets it; then it must exist), else the repository's .venv/connector when present."""
    path = os.environ.get("KVCEPH_CONNECTOR_PYTHON")
    if path:
        return path
    local = ROOT / ".venv/connector/bin/python"
    return str(local) if local.is_file() else None


# LMCache's `lmcache server` groups (cli/commands/server.py) but observability's, whose
# opentelemetry the connector venv lacks; then the configs its execute() builds, and the L2
# adapter its storage manager makes from the JSON (our class, constructed: no request is sent).
_PARSER = r"""
import argparse, json, sys
from lmcache.v1.distributed.config import add_storage_manager_args, parse_args_to_config
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.multiprocess.config import (add_coordinator_args, add_http_frontend_args,
    add_mp_server_args, add_p2p_args, parse_args_to_http_frontend_config,
    parse_args_to_mp_server_config)
parser = argparse.ArgumentParser()
for add in (add_mp_server_args, add_p2p_args, add_storage_manager_args, add_http_frontend_args,
            add_coordinator_args):
    add(parser)
args = parser.parse_args(json.loads(sys.argv[1]))
mp, http, sm = (parse_args_to_mp_server_config(args), parse_args_to_http_frontend_config(args),
                parse_args_to_config(args))
(l2,) = sm.l2_adapter_config.adapters
adapter = create_l2_adapter_from_registry(l2)
client = adapter._client
print(json.dumps({
    "host": mp.host, "port": mp.port, "chunk_size": mp.chunk_size, "hash": mp.hash_algorithm,
    "reap": mp.worker_reap_timeout_seconds, "grace": mp.worker_registration_grace_seconds,
    "http": [http.http_host, http.http_port],
    "l1_bytes": sm.l1_manager_config.memory_config.size_in_bytes,
    "eviction": sm.eviction_config.eviction_policy, "shared": l2.shared,
    "adapter": type(adapter).__name__, "client": type(client).__name__,
    "namespace": client.settings.s3.namespace, "endpoint": client.settings.s3.endpoint,
    "crc": client.settings.s3.verify_crc32c,
}))
adapter.close()
"""


def test_lmcache_server_parses_the_rendered_command_line(tmp_path):
    python = _connector_python()
    if python is None:
        pytest.skip("no connector venv (make connector-venv)")
    me = host()
    argv = argv_of(render.mp_server_unit(me))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "KVTEST", "AWS_SECRET_ACCESS_KEY": "kvtest"}
    done = subprocess.run(
        [python, "-c", _PARSER, json.dumps(argv[2:])],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    per_worker = kv_sizing.limits(me).max_local_cpu_size
    assert got == {
        "host": "127.0.0.1",
        "port": 5555,
        "chunk_size": me.lmcache.chunk_size,
        "hash": "blake3",
        "reap": 60.0,
        "grace": 300.0,
        "http": ["127.0.0.1", 8090],
        "l1_bytes": int(round(per_worker * 2, 3) * (1 << 30)),
        "eviction": "LRU",
        "shared": True,
        "adapter": "NativeConnectorL2Adapter",
        "client": "KvcephMPConnector",
        "namespace": MP_NAMESPACE,
        "endpoint": me.s3.remote_url.removeprefix("s3://"),
        "crc": me.lmcache.tier.verify_crc32c,
    }


_DEFAULTS = r"""
import ast, json, pathlib, lmcache
src = pathlib.Path(lmcache.__file__).parent / "integration/vllm/vllm_multi_process_adapter.py"
cls = next(n for n in ast.walk(ast.parse(src.read_text()))
           if isinstance(n, ast.ClassDef) and n.name == "ExtraConfigDefault")
print(json.dumps({t.id: ast.literal_eval(n.value) for n in cls.body if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name)}))
"""


def test_the_heartbeat_the_pause_is_sized_for_is_lmcaches_own(tmp_path):
    python = _connector_python()
    if python is None:
        pytest.skip("no connector venv (make connector-venv)")
    done = subprocess.run(
        [python, "-c", _DEFAULTS], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    defaults = json.loads(done.stdout)
    assert defaults["heartbeat_interval"] == render.MP_HEARTBEAT_S
    # kvceph sets no heartbeat of its own, so LMCache's default is the one engines run
    extra = render.kv_transfer_config(host())["kv_connector_extra_config"]
    assert "lmcache.mp.heartbeat_interval" not in extra


def test_a_cache_group_asked_half_in_mp_is_refused_in_one_line():
    # Same vLLM minor, other names: the hosts would never share a cache. During a roll the
    # group is mixed in what runs (the plan says both namespaces are live), never in what the
    # inventory asks.
    from deploys.settings.inventory import check_inventory

    v025 = {"vllm_version": "0.25.1", "packages": ["vllm==0.25.1"]}
    admin = s.load(BASE, "admin", ("ceph_admin",))
    mp = host(kvceph_engine_profile=v025)
    plain = s.load({**BASE, "kvceph_engine_profile": v025}, "gpu2", ("gpu",))
    with pytest.raises(SettingsError) as err:
        check_inventory([admin, mp, plain])
    message = str(err.value)
    assert message.startswith("gpu2: kvceph_engine_profile.mode = 'inprocess' differs from gpu1's")
    assert "their cache keys would differ" in message and "\n" not in message
    both = s.load({**MP, "kvceph_engine_profile": v025}, "gpu2", ("gpu",))
    check_inventory([admin, mp, both])


def test_the_lab_server_takes_the_rendered_argv():
    """The lab profile's stand-in (lab/engine mp_server.py) parses what kvceph renders, with the
    venv's ``server_executable`` as the program; the engine flags parse in the lab engine."""
    from kvceph_lab_engine import cli, mp_server

    profile = {
        "name": "lab-engine-mp",
        "packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"],
        "executable": "kvceph-lab-engine",
        "vllm_version": "0.34.0",
        "server_executable": "kvceph-lab-lmcache",
        "extra_args": ["--vllm-version", "0.34.0"],  # as group_data/lab.py's profile passes it
    }
    me = host(kvceph_engine_profile=profile)
    argv = argv_of(render.mp_server_unit(me))
    assert argv[0].endswith("/bin/kvceph-lab-lmcache") and argv[1] == "server"
    args = mp_server.parser().parse_args(argv[1:])
    mp_server.check(args)
    adapter = json.loads(args.l2_adapter[0])
    assert (adapter["type"], adapter["class_name"]) == ("native_plugin", "KvcephMPConnector")
    engine = argv_of(render.unit(me))
    assert engine[0].endswith("/bin/kvceph-lab-engine")
    served = cli._parser().parse_args(engine[1:])
    assert served.no_enable_extensible_kv_cache and served.vllm_version == "0.34.0"
    kv = json.loads(served.kv_transfer_config)
    assert kv["kv_connector"] == "LMCacheMPConnector"


def test_server_executable_must_be_a_program_name():
    with pytest.raises(SettingsError, match="server_executable"):
        host(kvceph_engine_profile={"server_executable": "../lmcache"})


def test_the_lab_mp_mode_selects_the_preset_and_the_stand_in():
    """KVCEPH_LAB_ENGINE_MODE=mp (group_data/lab.py): a lab NVIDIA host runs the preset with the
    lab engine and kvceph-lab-lmcache; without it the lab stays in process."""
    from deploys.settings import group_data

    env = {"KVCEPH_LAB_INSTANCE": "0", "KVCEPH_LAB_CEPH": "pacific"}
    plain = group_data.read(("all", "lab"), env)
    assert "kvceph_engine_preset" not in plain
    data = group_data.read(("all", "lab"), {**env, "KVCEPH_LAB_ENGINE_MODE": "mp"})
    me = s.load({**BASE, **data}, "gpu1", ("gpu",))
    p = me.engine.profile
    assert (p.mode, p.vllm_version, p.executable, p.server_executable) == (
        "mp", "0.34.0", "kvceph-lab-engine", "kvceph-lab-lmcache",
    )  # fmt: skip
    assert argv_of(render.mp_server_unit(me))[0].endswith("/bin/kvceph-lab-lmcache")
