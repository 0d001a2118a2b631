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

from deploys import kv_sizing, paths, render, versions
from deploys import settings as s
from deploys.settings.reader import SettingsError

ROOT = Path(__file__).resolve().parents[2]
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
MP = {**BASE, "kvceph_engine_preset": "vllm-0.34-mp"}
_SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


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
            "prefix": "kvceph-mp.vllm0.34.bfloat16@",
        },
    }
    text = render.mp_server_unit(me).lower()
    for word in ("secret", "access_key", "password", "token"):
        assert word not in text


def test_the_namespace_follows_the_kv_dtype_and_the_vllm_minor():
    assert render.mp_prefix(host(kvceph_kv_dtype="fp8")) == "kvceph-mp.vllm0.34.fp8@"
    old = host(kvceph_engine_profile={"vllm_version": "0.25.1", "packages": ["vllm==0.25.1"]})
    assert render.mp_prefix(old) == "kvceph-mp.vllm0.25.bfloat16@"


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
        "300",
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
    "prefix": client.settings.prefix, "endpoint": client.settings.s3.endpoint,
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
        "prefix": "kvceph-mp.vllm0.34.bfloat16@",
        "endpoint": me.s3.remote_url.removeprefix("s3://"),
        "crc": me.lmcache.tier.verify_crc32c,
    }


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
