"""hw/h200: the H200 inventory renders with kvceph's own code, and the local engine control reads
the rendered unit and env file the way systemd does (what the real-hardware proof relies on)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hw" / "h200"))

import local  # noqa: E402
import render as h200  # noqa: E402

from deploys import paths, render  # noqa: E402
from deploys.settings.secrets import S3Credentials, Secret  # noqa: E402

CREDS = S3Credentials(Secret("AKIAH200TEST0000"), Secret("s3cr3t/+Key$%0000"), "test")


@pytest.fixture(scope="module")
def me():
    return h200.load({})[1]["h200"]


def test_h200_inventory_derives_the_lmcache_config(me):
    config = render.lmcache_config(me)
    # 131072 tokens x 262,144 B (Qwen3-32B shape, from the model dir's config.json) + 25 %
    assert me.lmcache.kv_bytes_per_token == 262144
    assert config["max_local_cpu_size"] == 40.0
    assert config["enable_async_loading"] is True
    # The 73.6 s load margin capped at the 131072-token recompute (53.7 s on the H200 curve).
    assert config["lookup_timeout_ms"] == 53719
    assert config["local_cpu"] is True
    # kvceph's connector, the default (issue 37 item 2); ship.sh names the connector per run.
    assert config["remote_storage_plugins"] == ["kvceph"] and "remote_url" not in config
    assert config["extra_config"]["kvceph.endpoint"] == "lmcache.s3.lab:7480"
    assert config["extra_config"]["kvceph.connections"] == 16


def test_local_control_reads_exec_start_like_systemd(me):
    fields = local.unit_fields(render.unit(me))
    assert local.systemd_split(fields["ExecStart"]) == render.exec_start(me)
    assert fields["EnvironmentFile"] == [paths.ENV_PATH, paths.SECRETS_PATH]


def test_local_control_reads_the_env_file_like_systemd(me):
    digest = render.digest(me, CREDS)
    assert local.env_file(render.env_file(me, digest)) == dict(render.environment(me, digest))


@pytest.mark.parametrize(
    "arg", ["plain", '{"a":"b c"}', "it's", "back\\slash", "100%", "$HOME", "a b"]
)
def test_systemd_split_inverts_systemd_quote(arg):
    line = " ".join(render.systemd_quote(a) for a in ["/bin/x", arg, "--y"])
    assert local.systemd_split(line) == ["/bin/x", arg, "--y"]


PAIR = {
    "kvceph_model": "/opt/models/Qwen3-8B-shape",
    "kvceph_gpu_memory_utilization": 0.4,
    "kvceph_max_model_len": 40960,
}


def test_pair_inventory_is_two_hosts_of_one_cache_group(monkeypatch):
    # issue 38 item 2: two engines on the one GPU as two inference hosts of one cache group
    monkeypatch.setattr(h200, "INVENTORY", h200.HERE / "h200pair.py")
    _, hosts, groups = h200.load(PAIR)
    assert [g.hosts for g in groups] == [("h200a", "h200b")]
    a, b = hosts["h200a"], hosts["h200b"]
    assert (a.engine.engines[0].port, b.engine.engines[0].port) == (8000, 8001)
    assert a.lmcache.kv_bytes_per_token == 147456  # Qwen3-8B's shape, from model.py
    # each its own files, identical but for the port: one cache key, two engines
    assert render.lmcache_yaml(a) == render.lmcache_yaml(b)
    assert render.unit(a).replace("--port 8000", "--port 8001") == render.unit(b)
    assert "--gpu-memory-utilization 0.4" in render.unit(a)


def test_local_engine_reads_a_hosts_files_under_its_root(tmp_path, me):
    root = tmp_path / "h200b"
    unit = render.unit(me)
    env = render.env_file(me, render.digest(me, CREDS))
    (root / paths.UNIT_PATH.lstrip("/")).parent.mkdir(parents=True)
    (root / paths.UNIT_PATH.lstrip("/")).write_text(unit)
    (root / paths.ENV_PATH.lstrip("/")).parent.mkdir(parents=True)
    (root / paths.ENV_PATH.lstrip("/")).write_text(env)
    argv, environ, cwd = local.LocalEngine(paths.UNIT_PATH, str(tmp_path), str(root)).command()
    assert argv == render.exec_start(me)  # nothing per-host on the command line
    assert environ["LMCACHE_CONFIG_FILE"] == f"{root}{paths.LMCACHE_PATH}"
    assert environ["HOME"] == cwd == f"{root}/var/lib/vllm"
    # without a root: the paths as rendered
    assert local.rooted(paths.LMCACHE_PATH, "") == paths.LMCACHE_PATH
    assert local.rooted("/var/lib/vllmx /x/etc/kvceph", str(root)) == "/var/lib/vllmx /x/etc/kvceph"


def test_the_verifier_imports_with_the_gpu_machines_packages_only():
    """prove.py and measure.py import verify.py's runner on the GPU machine, whose site has
    the engine's wheels and not kvceph's controller packages (jinja2, pyinfra): the CPU dry run
    of plan050 found the runner importing deploys.render (jinja2) through verification/mp.py."""
    code = (
        "import sys; sys.modules.update(dict.fromkeys(('jinja2', 'pyinfra'), None)); "
        "import deploys.verification.runner, deploys.verification.object_names"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-800:]


def test_crc_table_counts_full_loads_and_sets_the_warm_up_apart(tmp_path):
    """crc.py: the warm-up after an engine start and a partial load are not in the medians."""
    import crc

    def warm(label, variant, ttft, hit=16384):
        return {"kind": "warm", "label": label, "variant": variant, "cold_label": "c16",
                "document_tokens": 16384, "ttft_s": ttft, "hit_tokens": hit,
                "expected_hit_tokens": 16384}  # fmt: skip

    cells = [warm(f"c16-kv25l8-w{i}", "kv25l8", t) for i, t in enumerate((1.0, 1.2, 1.1), 1)]
    nc = "kv25l8nc"
    cells += [warm(f"c16-{nc}-warmup", nc, 9.0), warm(f"c16-{nc}-w1", nc, 1.0)]
    cells += [warm(f"c16-{nc}-w2", nc, 1.0), warm(f"c16-{nc}-w3", nc, 5.0, 0)]
    (tmp_path / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    line = crc.table(crc.rows(str(tmp_path)))[1]
    assert line.startswith("16384 | 1.000/1.100/1.200 (3) | 1.000/1.000/1.000 (2) | 1.100 |")
