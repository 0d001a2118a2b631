"""Operations for model weights: the mirror's owner, its read-only policy, the push and the pull."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.files import File

from deploys import paths
from deploys.facts import memo
from deploys.facts.model import MirroredModel, ModelStaged
from deploys.facts.rgw import BucketPolicy, RgwUser

# The policy put-read-policy writes on the admin host, as RGW returns it: one definition for both.
from deploys.remote.s3admin import read_policy


def _script(python: str, script: str, *args) -> StringCommand:
    return StringCommand(python, QuoteString(script), *args)


@operation()
def mirror_owner(
    uid: str,
    display_name: str,
    admin_script: str = paths.ADMIN_SCRIPT,
    admin_config: str = paths.ADMIN_CONFIG,
    owner_config: str = paths.MODELS_OWNER_CONFIG,
):
    """
    The mirror bucket's owner: an RGW user whose generated keys stay on the Ceph admin host.

    + uid: RGW user id
    + display_name: display name for a new user
    + admin_script: s3admin.py on the host
    + admin_config: the S3 tier's INI (endpoint and region for the owner's file)
    + owner_config: private INI the owner's keys are written to (0600, root)
    """
    if memo.read(host, RgwUser, uid=uid) is not None and memo.read(host, File, path=owner_config):
        host.noop(f"RGW user {uid} exists, its keys in {owner_config}")
        return
    yield _script(
        "python3",
        admin_script,
        "--config",
        QuoteString(admin_config),
        "create-owner",
        QuoteString(uid),
        "--display-name",
        QuoteString(display_name),
        "--config-out",
        QuoteString(owner_config),
    )


@operation()
def mirror_read_policy(
    bucket: str,
    reader: str,
    admin_script: str = paths.ADMIN_SCRIPT,
    owner_config: str = paths.MODELS_OWNER_CONFIG,
):
    """
    Let the reader get and list the mirror bucket; its owner alone writes it.

    + bucket: the mirror bucket
    + reader: RGW user id of the inference hosts' read-only key
    + admin_script: s3admin.py on the host
    + owner_config: the owner's private INI
    """
    current = memo.read(
        host, BucketPolicy, bucket=bucket, admin_script=admin_script, config=owner_config
    )
    if current == read_policy(bucket, reader):
        host.noop(f"bucket {bucket} is read-only for {reader}")
        return
    yield _script(
        "python3",
        admin_script,
        "--config",
        QuoteString(owner_config),
        "put-read-policy",
        QuoteString(bucket),
        "--reader",
        QuoteString(reader),
    )


@operation()
def mirrored(
    bucket: str, prefix: str, directory: str, script: str, owner_config: str, timeout: int = 60
):
    """
    Push a model directory (already on the host) into the mirror, manifest last; then drop it.

    + bucket: the mirror bucket
    + prefix: the model's key prefix (``models/<name>@<revision>/``)
    + directory: the model directory on this host
    + script: model_mirror.py on the host
    + owner_config: the owner's private INI
    + timeout: seconds for the ``radosgw-admin`` fact
    """
    if memo.read(host, MirroredModel, bucket=bucket, prefix=prefix, timeout=timeout):
        host.noop(f"s3://{bucket}/{prefix} holds the model")
        return
    yield StringCommand(
        "python3",
        QuoteString(script),
        "push",
        "--config",
        QuoteString(owner_config),
        "--bucket",
        QuoteString(bucket),
        "--prefix",
        QuoteString(prefix),
        QuoteString(directory),
        "&&",
        "rm",
        "-rf",
        QuoteString(directory),
    )


@operation()
def staged(path: str, bucket: str, prefix: str, script: str, config: str, python: str, jobs=8):
    """
    Pull a model from the mirror into ``path``, checked against its manifest (idempotent).

    + path: the directory the engine serves
    + bucket: the mirror bucket
    + prefix: the model's key prefix
    + script: model_mirror.py on the host
    + config: private INI with the read-only key
    + python: the interpreter to run it (stdlib only)
    + jobs: parallel downloads
    """
    if host.get_fact(ModelStaged, path=path):
        host.noop(f"{path} is staged")
        return
    yield _script(
        python,
        script,
        "pull",
        "--config",
        QuoteString(config),
        "--bucket",
        QuoteString(bucket),
        "--prefix",
        QuoteString(prefix),
        "--jobs",
        str(int(jobs)),
        QuoteString(path),
    )
