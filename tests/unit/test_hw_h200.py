"""hw/h200: the H200 inventory renders with kvceph's own code, and the local engine control reads
the rendered unit and env file the way systemd does (what the real-hardware proof relies on)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hw" / "h200"))

import local  # noqa: E402
import render as h200  # noqa: E402

from deploys import paths, render  # noqa: E402
from deploys.secrets import S3Credentials, Secret  # noqa: E402

CREDS = S3Credentials(Secret("AKIAH200TEST0000"), Secret("s3cr3t/+Key$%0000"), "test")


@pytest.fixture(scope="module")
def me():
    return h200.load({})[1]


def test_h200_inventory_derives_the_lmcache_config(me):
    config = render.lmcache_config(me)
    # 131072 tokens x 262,144 B (Qwen3-32B shape, from the model dir's config.json) + 25 %
    assert me.lmcache.kv_bytes_per_token == 262144
    assert config["max_local_cpu_size"] == 40.0
    assert config["enable_async_loading"] is True
    # The 73.6 s load margin capped at the 131072-token recompute (53.7 s on the H200 curve).
    assert config["lookup_timeout_ms"] == 53719
    assert config["local_cpu"] is True
    assert config["remote_url"] == "s3://lmcache.s3.lab:7480"


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
