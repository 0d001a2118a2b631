"""render: every file for NVIDIA and Gaudi3 x every supported vLLM version, checked by the real
consumers: LMCache 0.5.6's own config loader and ``systemd-analyze verify``."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploys import paths, render
from deploys import settings as s
from deploys.engine import versions
from deploys.settings.secrets import S3Credentials, Secret

CREDS = S3Credentials(Secret("AKIALMCACHE0000"), Secret("s3cr3t/+Key0000"), "test")
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
# LMCache's stock S3 connector (remote_url + s3_* keys), pinned by the tests of its rendering:
# kvceph's connector is the default.
STOCK = {"kvceph_lmcache_connector": "lmcache"}
GROUP = {"nvidia": "gpu", "gaudi": "gaudi"}


def host(accelerator="nvidia", vllm="0.33.0", **data):
    profile = {
        "vllm_version": vllm,
        "packages": [f"vllm=={vllm}", "lmcache==0.5.6"],
    }
    # the files of a pair with a known KV-load defect render the same once it is accepted
    defect = versions.kv_load_defect(vllm, "0.5.6") and accelerator == "nvidia"
    data = {**BASE, "kvceph_engine_profile": profile, **data}
    if defect:
        data.setdefault("kvceph_accept_kv_load_defect", True)
    return s.load(data, f"{GROUP[accelerator]}1", (GROUP[accelerator],))


MATRIX = [(a, v) for a in ("nvidia", "gaudi") for v in ("0.25.1", "0.26.0", "0.33.0", "0.34.0")]
IDS = [f"{a}-vllm{v}" for a, v in MATRIX]


def test_matrix_covers_every_supported_vllm():
    assert {versions.minor(v) for _, v in MATRIX} == set(versions.SUPPORTED_VLLM)


# --- LMCache YAML --------------------------------------------------------------------------------


def _lmcache_python() -> str | None:
    """LMCache's venv python: ``$KVCEPH_LMCACHE_PYTHON`` (make lmcache-venv sets it; then it
    must exist), else /tmp/lmc when present; the test skips only when neither is set up."""
    path = os.environ.get("KVCEPH_LMCACHE_PYTHON")
    if path:
        return path
    return "/tmp/lmc/bin/python" if Path("/tmp/lmc/bin/python").is_file() else None


_LOADER = r"""
import json, logging, sys
from lmcache.v1.config import LMCacheEngineConfig
records = []
class Grab(logging.Handler):
    def emit(self, record):
        records.append(record)
grab = Grab(level=logging.WARNING)
for name in list(logging.root.manager.loggerDict) + ["lmcache", ""]:
    logging.getLogger(name).addHandler(grab)
out = {}
for path in sys.argv[1:]:
    records.clear()
    config = LMCacheEngineConfig.from_file(path)
    config.validate()
    out[path] = {
        "warnings": [r.getMessage() for r in records],
        "remote_url": config.remote_url,
        "remote_storage_plugins": config.remote_storage_plugins,
        "chunk_size": config.chunk_size,
        "local_cpu": config.local_cpu,
        "max_local_cpu_size": config.max_local_cpu_size,
        "lookup_timeout_ms": config.lookup_timeout_ms,
        "blocking_timeout_secs": config.blocking_timeout_secs,
        "enable_async_loading": config.enable_async_loading,
        "pre_caching_hash_algorithm": config.pre_caching_hash_algorithm,
        "extra_config": config.extra_config,
    }
print(json.dumps(out))
"""


def _lmcache_source(python: str) -> Path:
    """The lmcache package directory of ``python``'s LMCache."""
    src = subprocess.run(
        [python, "-c", "import lmcache, os; print(os.path.dirname(lmcache.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    return Path(src)


def _loaded_by_lmcache(python: str, tmp_path: Path, **data) -> tuple[dict, dict]:
    """Every MATRIX host's lmcache.yaml (``data`` over its settings) read by LMCache's own
    loader: (path -> the host's settings, path -> what LMCache read)."""
    paths = {}
    for (acc, v), name in zip(MATRIX, IDS, strict=True):
        me = host(acc, v, **data)
        path = tmp_path / f"{name}.yaml"
        path.write_text(render.lmcache_yaml(me))
        paths[str(path)] = me
    done = subprocess.run(
        [python, "-c", _LOADER, *paths],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return paths, json.loads(done.stdout.strip().splitlines()[-1])


def _s3_adapter_keys(python: str) -> set[str]:
    """extra_config keys LMCache's S3 adapter reads, from its own source."""
    text = (_lmcache_source(python) / "v1/storage_backend/connector/s3_adapter.py").read_text()
    return set(re.findall(r'extra_config\.get\("([a-z0-9_]+)"', text))


@pytest.mark.skipif(_lmcache_python() is None, reason="no LMCache venv (make lmcache-venv)")
def test_lmcache_yaml_loads_cleanly_with_lmcache_own_loader(tmp_path):
    python = _lmcache_python()
    paths, loaded = _loaded_by_lmcache(python, tmp_path, **STOCK)
    adapter_keys = _s3_adapter_keys(python)
    assert {"s3_region", "disable_tls"} <= adapter_keys
    for path, me in paths.items():
        got = loaded[path]
        assert got["warnings"] == [], (path, got["warnings"])
        assert got["remote_url"] == "s3://lmcache.s3.cephlab.com:443"
        assert got["chunk_size"] == 256 and got["local_cpu"] is True
        assert got["pre_caching_hash_algorithm"] == "sha256_cbor"
        # The derived buffer and timeouts arrive as LMCache reads them (not its defaults).
        want = render.lmcache_config(me)
        for key in ("max_local_cpu_size", "lookup_timeout_ms", "blocking_timeout_secs"):
            assert got[key] == want[key], (path, key, got[key], want[key])
        assert got["enable_async_loading"] is True
        assert got["lookup_timeout_ms"] != 3000 and got["max_local_cpu_size"] != 5.0
        extra = got["extra_config"]
        # https by default: the renderer leaves the adapter's own TLS default (on)
        assert extra["s3_region"] == me.s3.region and not extra.get("disable_tls")
        assert set(extra) <= adapter_keys, set(extra) - adapter_keys
        assert "save_chunk_meta" not in extra or extra["save_chunk_meta"] is False


def test_lmcache_yaml_has_no_key_the_version_ignores():
    me = host(
        **STOCK,
        kvceph_lmcache_extra_config={"s3_max_io_concurrency": 1024, "s3_num_io_threads": 32},
    )
    text = render.lmcache_yaml(me)
    assert "s3_max_io_concurrency" not in text
    assert "  s3_num_io_threads: 32\n" in text


def test_https_endpoint_keeps_tls():
    me = host(**STOCK, kvceph_s3_endpoint="https://s3.cephlab.com:443")
    config = render.lmcache_config(me)
    assert "disable_tls" not in config["extra_config"]
    assert config["remote_url"] == "s3://lmcache.s3.cephlab.com:443"


def test_yaml_strings_are_quoted_so_yaml_cannot_reinterpret_them():
    import yaml

    # YAML 1.1 would read a bare `no` as False; both connectors' region key.
    for data, key in ((STOCK, "s3_region"), ({}, "kvceph.region")):
        loaded = yaml.safe_load(render.lmcache_yaml(host(**data, kvceph_s3_region="no")))
        assert loaded["extra_config"][key] == "no"


# --- kv-transfer config and ExecStart -------------------------------------------------------


@pytest.mark.parametrize(("acc", "vllm"), MATRIX, ids=IDS)
def test_kv_transfer_json_fields_are_accepted_by_the_version(acc, vllm):
    me = host(acc, vllm)
    config = json.loads(render.kv_transfer_json(me))
    assert set(config) <= versions.KV_TRANSFER_FIELDS[versions.minor(vllm)]
    assert config == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
    }
    assert "kv_parallel_size" not in config


def test_kv_transfer_refuses_a_field_the_version_lacks(monkeypatch):
    monkeypatch.setitem(versions.KV_TRANSFER_FIELDS, "0.33", frozenset({"kv_connector"}))
    with pytest.raises(ValueError, match="does not accept"):
        render.kv_transfer_config(host())


def _systemd_split(line: str) -> list[str]:
    """systemd's ExecStart word splitting (quotes + C escapes, %% and $$), for the test."""
    words, i, n = [], 0, len(line)
    while i < n:
        while i < n and line[i] == " ":
            i += 1
        if i >= n:
            break
        word, quote = [], None
        while i < n:
            c = line[i]
            if quote:
                if c == "\\":
                    word.append(line[i + 1])
                    i += 2
                    continue
                if c == quote:
                    quote = None
                    i += 1
                    continue
            elif c in "'\"":
                quote = c
                i += 1
                continue
            elif c == " ":
                break
            if c in "%$" and i + 1 < n and line[i + 1] == c:
                i += 1
            word.append(c)
            i += 1
        words.append("".join(word))
    return words


def test_exec_start_matches_the_design():
    me = host()
    argv = render.exec_start(me)
    # Through the engine's venv link: only its restart in the roll switches the code.
    assert argv[:3] == ["/opt/kvceph/engines/vllm/bin/vllm", "serve", "Qwen/Qwen3-32B"]
    joined = " ".join(argv)
    for flag in (
        "--host 0.0.0.0",
        "--port 8000",
        "--gpu-memory-utilization 0.55",
        "--max-model-len 40960",
        "--tensor-parallel-size 2",
    ):
        assert flag in joined
    assert argv[argv.index("--kv-transfer-config") + 1] == render.kv_transfer_json(me)
    assert _systemd_split(render.exec_start_line(me)) == argv


def test_exec_start_quotes_hostile_arguments_for_systemd():
    me = host(
        kvceph_engine_profile={
            "extra_args": ["--chat-template", "it's 100% $HOME \\n", ";", ""],
        }
    )
    line = render.exec_start_line(me)
    assert _systemd_split(line) == render.exec_start(me)
    assert "'it\\'s 100%% $$HOME \\\\n'" in line
    assert " ';' " in line


def test_newline_in_an_argument_is_refused():
    with pytest.raises(ValueError, match="newline"):
        render.systemd_quote("a\nb")


# --- unit, env, AWS files, digest ------------------------------------------------------------

_SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def _verify(root: Path, me) -> subprocess.CompletedProcess:
    unit = root / "etc/systemd/system/vllm.service"
    unit.write_text(render.unit(me))
    return subprocess.run(
        [_SYSTEMD_ANALYZE, "verify", "--man=no", f"--root={root}", paths.UNIT_PATH],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _stub(root: Path, me) -> Path:
    exe = root / render.exec_start(me)[0].lstrip("/")
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


@pytest.mark.skipif(_SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize(("acc", "vllm"), MATRIX, ids=IDS)
def test_unit_passes_systemd_analyze_verify(systemd_root, acc, vllm):
    me = host(acc, vllm)
    _stub(systemd_root, me)
    done = _verify(systemd_root, me)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.skipif(_SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")
def test_systemd_analyze_check_is_real(systemd_root):
    # Without the executable, and with a bad directive, verify must complain.
    me = host(kvceph_venv="/opt/nowhere/venv")
    assert "not executable" in _verify(systemd_root, me).stderr
    _stub(systemd_root, me)
    unit = systemd_root / "etc/systemd/system/vllm.service"
    unit.write_text(render.unit(me).replace("Restart=always", "Restart=sometimes"))
    done = subprocess.run(
        [_SYSTEMD_ANALYZE, "verify", "--man=no", f"--root={systemd_root}", paths.UNIT_PATH],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "restart specifier" in done.stderr


def test_unit_has_the_service_settings():
    text = render.unit(host())
    for line in (
        "User=vllm",
        "EnvironmentFile=/etc/kvceph/vllm.env",
        "LimitMEMLOCK=infinity",
        "Restart=always",
        "RestartSec=10",
        # 5 starts that each take the whole start budget still count as one crash loop.
        "StartLimitIntervalSec=4550",
        "StartLimitBurst=5",
        "TimeoutStartSec=900",
        "KillMode=mixed",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/vllm",
        "PrivateTmp=yes",
        "WantedBy=multi-user.target",
    ):
        assert f"\n{line}\n" in text
    # Device access stays open: ProtectClock= and PrivateDevices= would close /dev/nvidia*.
    assert "\nProtectClock=" not in text and "\nPrivateDevices=" not in text
    assert 'HF_HOME="/var/lib/vllm/.cache/huggingface"' in render.env_file(host())


def test_hf_home_elsewhere_is_writable_and_created():
    me = host(kvceph_hf_home="/data/hf", kvceph_restart_delay=2, kvceph_health_timeout=60)
    text = render.unit(me)
    assert "\nReadWritePaths=/var/lib/vllm /data/hf\n" in text
    assert "\nRestartSec=2\n" in text and "\nStartLimitIntervalSec=310\n" in text
    assert render.writable_paths(me) == ["/var/lib/vllm", "/data/hf"]
    assert 'HF_HOME="/data/hf"' in render.env_file(me)


def test_a_single_address_bind_is_open_to_the_host_itself():
    # The deploy's checks on the host then come from that address (the kernel's choice).
    env = dict(render.environment(host(kvceph_vllm_bind="10.67.0.21")))
    assert env["KVCEPH_OPEN_NETWORKS"].split(",")[:3] == ["127.0.0.0/8", "::1/128", "10.67.0.21/32"]
    for bind in ("0.0.0.0", "::", "127.0.0.1", "::1"):
        env = dict(render.environment(host(kvceph_vllm_bind=bind)))
        assert env["KVCEPH_OPEN_NETWORKS"] == "127.0.0.0/8,::1/128", bind


def _parse_env(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        assert value.startswith('"') and value.endswith('"'), line
        out[key] = re.sub(r'\\([\\"`$])', r"\1", value[1:-1])
    return out


@pytest.mark.parametrize(("acc", "vllm"), MATRIX, ids=IDS)
def test_env_file(acc, vllm):
    me = host(acc, vllm)
    env = _parse_env(render.env_file(me, "d" * 64))
    assert env["LMCACHE_CONFIG_FILE"] == "/etc/kvceph/lmcache.yaml"
    assert env["PYTHONHASHSEED"] == "67"
    assert env["AWS_PROFILE"] == "lmcache"
    assert env["HOME"] == "/var/lib/vllm"
    assert env["KVCEPH_DIGEST"] == "d" * 64
    assert ("PT_HPU_GPU_MIGRATION" in env) == (acc == "gaudi")
    assert "VLLM_SKIP_WARMUP" not in env
    assert "KVCEPH_DIGEST" not in render.env_file(me)


def test_env_values_are_quoted_for_systemd():
    me = host(kvceph_extra_env={"X_VAL": 'a "b" $c \\d'})
    assert _parse_env(render.env_file(me))["X_VAL"] == 'a "b" $c \\d'


def test_env_refuses_overriding_a_managed_variable():
    # settings refuse it first, naming kvceph_extra_env (test_engine_env.py); render still does
    me = host()
    me = dataclasses.replace(
        me, engine=dataclasses.replace(me.engine, extra_env=(("PYTHONHASHSEED", "0"),))
    )
    with pytest.raises(ValueError, match="managed by kvceph"):
        render.env_file(me)


def test_aws_files():
    import configparser

    me = host()
    creds = configparser.ConfigParser()
    creds.read_string(render.aws_credentials(me, CREDS))
    assert creds["lmcache"]["aws_access_key_id"] == "AKIALMCACHE0000"
    assert creds["lmcache"]["aws_secret_access_key"] == "s3cr3t/+Key0000"
    config = configparser.ConfigParser()
    config.read_string(render.aws_config(me))
    profile = config["profile lmcache"]
    assert profile["region"] == "default"
    assert profile["endpoint_url"] == "https://s3.cephlab.com:443"
    assert profile["response_checksum_validation"] == "when_required"
    assert "preferred_transfer_client = crt" in profile["s3"]
    assert "s3cr3t" not in render.aws_config(me)


@pytest.mark.skipif(
    not __import__("importlib").util.find_spec("botocore"), reason="botocore not installed"
)
def test_aws_config_is_what_botocore_reads(tmp_path, monkeypatch):
    import botocore.session

    me = host()
    (tmp_path / "config").write_text(render.aws_config(me))
    (tmp_path / "credentials").write_text(render.aws_credentials(me, CREDS))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    session = botocore.session.Session(profile="lmcache")
    assert session.get_config_variable("region") == "default"
    assert session.get_scoped_config()["s3"]["preferred_transfer_client"] == "crt"
    assert session.get_credentials().access_key == "AKIALMCACHE0000"


def test_hosts_lines_one_per_address():
    line = "{} lmcache.s3.cephlab.com s3.cephlab.com  # kvceph"
    assert render.hosts_lines(host()) == [line.format("10.0.0.5")]
    two = host(kvceph_s3_endpoint_ip=None, kvceph_s3_endpoint_ips=["10.0.0.5", "10.0.0.6"])
    assert render.hosts_lines(two) == [line.format("10.0.0.5"), line.format("10.0.0.6")]
    assert render.hosts_lines(host(kvceph_s3_wildcard_dns=True)) == []


def test_hosts_file_replaces_only_our_lines_in_place():
    current = (
        "127.0.0.1 localhost\n10.0.0.9 lmcache.s3.cephlab.com s3.cephlab.com  # kvceph\n"
        "10.213.7.11 ceph1\n"
    )
    ours = ["10.0.0.5 a  # kvceph", "10.0.0.6 a  # kvceph"]
    text = render.hosts_file(current, ours)
    assert text == "127.0.0.1 localhost\n" + "".join(f"{x}\n" for x in ours) + "10.213.7.11 ceph1\n"
    assert render.hosts_file(text, ours) == text  # converged
    assert (
        render.hosts_file("127.0.0.1 localhost", ours[:1])
        == "127.0.0.1 localhost\n" + ours[0] + "\n"
    )
    assert render.hosts_file(text, []) == "127.0.0.1 localhost\n10.213.7.11 ceph1\n"


def test_digest_covers_every_input_and_is_stable():
    me = host()
    d = render.digest(me, CREDS)
    assert re.fullmatch(r"[0-9a-f]{64}", d)
    assert render.digest(host(), CREDS) == d
    other_key = S3Credentials(Secret("AKIALMCACHE0000"), Secret("rotated"), "test")
    variants = [
        render.digest(me, other_key),
        render.digest(host(kvceph_lmcache_chunk_size=512), CREDS),
        render.digest(host(kvceph_python_hash_seed=1), CREDS),
        render.digest(host(kvceph_gpu_memory_utilization=0.5), CREDS),
        render.digest(host(kvceph_s3_endpoint_ip="10.0.0.6"), CREDS) == d,  # /etc/hosts only
    ]
    assert all(v != d for v in variants[:4])
    assert variants[4] is True


def test_rendering_never_prints_the_secret(capsys):
    me = host()
    render.digest(me, CREDS)
    assert repr(CREDS.secret_key) == "'***'"
    assert "s3cr3t" not in capsys.readouterr().out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


# --- kvceph's connector: an LMCache remote storage plugin ----------------------------------------


def test_receive_dir_is_rendered_only_when_set():
    """kvceph_connector_receive_dir reaches the plugin as kvceph.receive_dir; unset, the file
    is byte-identical to one rendered before the key existed (no roll on upgrade)."""
    acc, v = MATRIX[0]
    plain = render.lmcache_yaml(host(acc, v, kvceph_lmcache_connector="kvceph"))
    assert "receive_dir" not in plain
    shm = render.lmcache_yaml(
        host(acc, v, kvceph_lmcache_connector="kvceph", kvceph_connector_receive_dir="/dev/shm")
    )
    assert yaml.safe_load(shm)["extra_config"]["kvceph.receive_dir"] == "/dev/shm"
    assert [x for x in shm.splitlines() if "receive_dir" not in x] == plain.splitlines()


def test_refresh_is_rendered_only_when_set():
    """kvceph_connector_refresh_s reaches the plugin as kvceph.refresh_s (0 included: never);
    unset, the file stays as it was before the key existed."""
    acc, v = MATRIX[0]
    plain = render.lmcache_yaml(host(acc, v, kvceph_lmcache_connector="kvceph"))
    assert "refresh_s" not in plain
    for seconds in (15, 0):
        got = render.lmcache_yaml(
            host(acc, v, kvceph_lmcache_connector="kvceph", kvceph_connector_refresh_s=seconds)
        )
        assert yaml.safe_load(got)["extra_config"]["kvceph.refresh_s"] == seconds
        assert [x for x in got.splitlines() if "refresh_s" not in x] == plain.splitlines()


def test_crc32c_check_is_rendered_only_when_off():
    """kvceph_connector_verify_crc32c: false reaches the plugin as kvceph.verify_crc32c: false;
    on (the default, the plugin's own too since issue 50) leaves the file as it was."""
    acc, v = MATRIX[0]
    plain = render.lmcache_yaml(host(acc, v, kvceph_lmcache_connector="kvceph"))
    assert "verify_crc32c" not in plain
    on = host(acc, v, kvceph_lmcache_connector="kvceph", kvceph_connector_verify_crc32c=True)
    assert render.lmcache_yaml(on) == plain
    got = render.lmcache_yaml(
        host(acc, v, kvceph_lmcache_connector="kvceph", kvceph_connector_verify_crc32c=False)
    )
    assert yaml.safe_load(got)["extra_config"]["kvceph.verify_crc32c"] is False
    assert [x for x in got.splitlines() if "verify_crc32c" not in x] == plain.splitlines()


@pytest.mark.skipif(_lmcache_python() is None, reason="no LMCache venv (make lmcache-venv)")
def test_kvceph_connector_yaml_loads_with_lmcache_own_loader(tmp_path):
    """LMCache 0.5.6 reads the plugin's yaml: one remote tier (no remote_url), the plugin's
    module and class under the keys its plugin launcher reads, the contract's kvceph.* keys."""
    python = _lmcache_python()
    paths, loaded = _loaded_by_lmcache(python, tmp_path, kvceph_lmcache_connector="kvceph")
    launcher = (_lmcache_source(python) / "v1/storage_backend/connector/__init__.py").read_text()
    templates = set(re.findall(r'"(remote_storage_plugin\.%s\.[a-z_]+)"', launcher))
    assert templates == {
        "remote_storage_plugin.%s.module_path",
        "remote_storage_plugin.%s.class_name",
    }
    for path in paths:
        got = loaded[path]
        assert got["warnings"] == [], (path, got["warnings"])
        assert got["remote_url"] is None
        assert got["remote_storage_plugins"] == ["kvceph"]
        extra = got["extra_config"]
        assert {t % "kvceph" for t in templates} <= set(extra)
        assert (
            extra["remote_storage_plugin.kvceph.module_path"] == "kvceph_connector.lmcache_plugin"
        )
        assert extra["remote_storage_plugin.kvceph.class_name"] == "KvcephConnectorAdapter"
        assert {k for k in extra if k.startswith("kvceph.")} == {
            "kvceph.endpoint",
            "kvceph.region",
            "kvceph.tls",
            "kvceph.connections",
            "kvceph.timeout_s",
            "kvceph.min_hit_tokens",
            "kvceph.namespace",
        }
        assert extra["kvceph.namespace"].startswith("kv/") and extra["kvceph.namespace"][-1] == "/"
        assert extra["kvceph.endpoint"] == "lmcache.s3.cephlab.com:443"
        assert extra["kvceph.tls"] is True and extra["kvceph.connections"] == 16
        assert extra["kvceph.timeout_s"] == 5.0 and extra["kvceph.min_hit_tokens"] == 0
        assert extra["save_chunk_meta"] is False
        # No stock S3 key: kvceph's connector would not read it.
        assert not {k for k in extra if k.startswith("s3_") or k == "disable_tls"}


@pytest.mark.skipif(_lmcache_python() is None, reason="no LMCache venv (make lmcache-venv)")
def test_remote_tier_templates_are_lmcache_own_words():
    """deploys/tier/remote_tier.py's patterns are the log templates of the installed LMCache."""
    from deploys.tier import remote_tier

    src = _lmcache_source(_lmcache_python()) / "v1/storage_backend"
    text = "".join(
        (src / f).read_text() for f in ("__init__.py", "remote_backend.py", "connector/__init__.py")
    )
    for fixed in remote_tier.PREFILTER.split("|"):
        assert fixed in text, fixed
    # The "success" LMCache logs even when the connector inside failed (see remote_tier.py).
    assert '"Created remote backend for plugin: %s"' in text
    # The stock S3 connector's breaker (status.py's "S3 OFF", the deploy's restart reason).
    s3 = (src / "connector/s3_connector.py").read_text()
    assert f'"{remote_tier.S3_DISABLED} %s "' in s3


def test_kvceph_connector_never_beside_remote_url():
    text = render.lmcache_yaml(host(kvceph_lmcache_connector="kvceph"))
    assert "remote_url" not in text and 'remote_storage_plugins: ["kvceph"]\n' in text
    assert "s3_prefer_http2" not in text


def test_kvceph_tls_follows_the_endpoint_scheme():
    me = host(kvceph_lmcache_connector="kvceph", kvceph_s3_endpoint="https://s3.cephlab.com:443")
    extra = render.lmcache_config(me)["extra_config"]
    assert extra["kvceph.tls"] is True and extra["kvceph.endpoint"] == "lmcache.s3.cephlab.com:443"


def test_kvceph_min_hit_tokens_from_the_resolved_crossover():
    import dataclasses

    from deploys.tier import crossover

    me = host(kvceph_lmcache_connector="kvceph")
    tier = dataclasses.replace(me.lmcache.tier, crossover=crossover.Crossover(4096, "test"))
    me = dataclasses.replace(me, lmcache=dataclasses.replace(me.lmcache, tier=tier))
    assert "  kvceph.min_hit_tokens: 4096\n" in render.lmcache_yaml(me)
    assert "skip_short_puts" not in render.lmcache_yaml(me)  # off: no line, no roll
    # A new crossover is a new lmcache.yaml, so a new digest: the group rolls.
    assert render.digest(me, CREDS) != render.digest(host(kvceph_lmcache_connector="kvceph"), CREDS)


def test_a_new_connector_build_restarts_its_engines_only(monkeypatch):
    from deploys.tier import connector_package

    kvceph, stock = host(kvceph_lmcache_connector="kvceph"), host(**STOCK)
    before = (render.digest(kvceph, CREDS), render.digest(stock, CREDS))
    wheel = connector_package.current()
    changed = __import__("dataclasses").replace(wheel, content="0" * 64)
    monkeypatch.setattr(connector_package, "current", lambda: changed)
    assert render.digest(kvceph, CREDS) != before[0]
    assert render.digest(stock, CREDS) == before[1]


def test_kvceph_skip_short_puts_is_rendered_only_when_on():
    me = host(kvceph_lmcache_connector="kvceph", kvceph_skip_short_puts=True)
    assert "  kvceph.skip_short_puts: true\n" in render.lmcache_yaml(me)
    # The plugin reads it as LMCache hands it over (a YAML bool): the same settings function.
    extra = render.lmcache_config(me)["extra_config"]
    assert extra["kvceph.skip_short_puts"] is True
    assert render.digest(me, CREDS) != render.digest(host(kvceph_lmcache_connector="kvceph"), CREDS)
