"""Model weights on the lab: the mirror, its read-only key, and bad model inputs refused early."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from conftest import (
    INFERENCE,
    LAB_MODEL_REVISION,
    MODEL_ARGUMENT,
    S3_ADMIN_URL,
    path_style_client,
    pyinfra,
    secrets,
    ssh,
)

REVISION_PREFIX = "models/Qwen/Qwen3-32B@"


def _one_line_refusal(run, expected: str) -> None:
    assert run.rc != 0
    lines = [line for line in run.output.splitlines() if "kvceph:" in line]
    assert len(lines) == 1 and expected in lines[0], run.output[-3000:]
    assert "; fix: " in lines[0]
    assert run.changed() == [], "a refused run touched a host"


@pytest.mark.parametrize(
    "data,expected",
    [
        (("kvceph_model_revision=main",), "kvceph_model_revision = 'main': is not a commit hash"),
        (
            ("kvceph_model_revision=" + "f" * 40, "kvceph_model_mirror_from=null"),
            f"the mirror has no s3://kvceph-models/{REVISION_PREFIX}{'f' * 40}/",
        ),
    ],
)
def test_bad_model_inputs_stop_before_any_host_is_touched(converged, data, expected):
    args = [a for d in data for a in ("--data", d)]
    _one_line_refusal(pyinfra(*args), expected)


def test_every_host_serves_the_staged_model_offline(converged):
    for host in INFERENCE:
        argv = ssh(host, "systemctl show -p ExecStart --value vllm.service").stdout
        assert f"serve {MODEL_ARGUMENT} --served-model-name Qwen/Qwen3-32B " in argv
        assert 'HF_HUB_OFFLINE="1"' in ssh(host, "cat /etc/kvceph/vllm.env").stdout
        mode = ssh(host, "stat -c '%U:%G %a' /etc/kvceph/models-s3.ini").stdout.strip()
        assert mode == "root:root 600"


def test_keys_cannot_cross_buckets(converged):
    keys = secrets()

    # A fresh client (connection) for every refused write: RGW answers 403 before reading the
    # body, and a reused connection would read the next request out of step.
    def reader():
        return path_style_client(
            S3_ADMIN_URL, keys["KVCEPH_MODELS_ACCESS_KEY"], keys["KVCEPH_MODELS_SECRET_KEY"]
        )

    def kv():
        return path_style_client(
            S3_ADMIN_URL, keys["KVCEPH_S3_ADMIN_ACCESS_KEY"], keys["KVCEPH_S3_ADMIN_SECRET_KEY"]
        )

    listed = reader().list_objects_v2(Bucket="kvceph-models", Prefix=REVISION_PREFIX)
    manifests = [o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith("manifest.json")]
    assert manifests == [f"{REVISION_PREFIX}{LAB_MODEL_REVISION}/kvceph-manifest.json"]
    for client, bucket, key in (
        (reader, "kvceph-models", f"{REVISION_PREFIX}x/planted"),  # the models key: read-only
        (reader, "lmcache", "planted"),  # ... and nothing in the KV bucket
        (kv, "kvceph-models", f"{REVISION_PREFIX}x/planted"),  # the KV key: not the mirror
    ):
        with pytest.raises(ClientError) as err:
            client().put_object(Bucket=bucket, Key=key, Body=b"x")
        assert err.value.response["Error"]["Code"] == "AccessDenied", (bucket, key)
    with pytest.raises(ClientError) as err:
        kv().get_object(Bucket="kvceph-models", Key=manifests[0])
    assert err.value.response["Error"]["Code"] == "AccessDenied"
