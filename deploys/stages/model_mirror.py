"""Stage 2c "Model mirror": the mirror bucket, its owner and read-only reader, the models in it.

Runs on the Ceph admin host, only when an inference host uses ``kvceph_model_source mirror``.
The owner's keys are generated there and never leave it; the reader holds the operator's
read-only key (KVCEPH_MODELS_ACCESS_KEY / _SECRET_KEY), which the inference hosts use. A bucket
policy lets the reader get and list, nothing else: the KV key cannot write the models bucket,
and the models key cannot write the KV bucket. A model missing from the mirror is uploaded
once from the controller's ``kvceph_model_mirror_from`` directory (manifest last).
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from deploys import paths
from deploys.cluster import ceph_cli
from deploys.facts import memo
from deploys.facts.model import MirroredModel
from deploys.operations import files as kvfiles
from deploys.operations import model, s3
from deploys.preflight import Preflight
from deploys.settings import HostSettings, model_source
from deploys.settings.secrets import Secret
from deploys.stages import s3_tier


def mirrored_models(checked: Preflight) -> list[model_source.ModelSource]:
    """Every distinct mirrored model of the inventory (name and revision)."""
    found: dict[tuple[str, str], model_source.ModelSource] = {}
    for h in checked.hosts.values():
        if h.is_inference and h.engine.source.source == "mirror":
            found.setdefault((h.engine.source.name, h.engine.source.revision), h.engine.source)
    return list(found.values())


@deploy("Model mirror")
def apply(me: HostSettings, checked: Preflight) -> None:
    sources = mirrored_models(checked)
    if not sources:
        return
    bucket, owner, reader = model_source.mirror_users(sources)
    creds = checked.credentials
    timeout = ceph_cli.command_timeout(me.ceph)
    # The S3 tier made the script directory on this host.
    kvfiles.helper_script(
        "Model mirror helper",
        paths.MIRROR_SCRIPT,
        paths.MIRROR_SOURCE.read_text(),
        directory_label=None,
    )
    model.mirror_owner(
        name=f"RGW user {owner} (owns the model mirror)",
        uid=owner,
        display_name="kvceph model mirror",
        owner_config=paths.MODELS_OWNER_CONFIG,
    )
    kvfiles.private_file(
        name=f"Model mirror reader credentials {paths.MODELS_ADMIN_READER_CONFIG}",
        path=paths.MODELS_ADMIN_READER_CONFIG,
        content=Secret(s3_tier.admin_config(me, creds.models_access_key, creds.models_secret_key)),
    )
    s3.user(
        name=f"RGW user {reader} (reads the model mirror)",
        uid=reader,
        display_name="kvceph model mirror, read-only",
        access_key=creds.models_access_key,
        secret_key=creds.models_secret_key,
        admin_config=paths.MODELS_ADMIN_READER_CONFIG,
        timeout=timeout,
    )
    s3.bucket(
        name=f"Bucket {bucket}",
        bucket_name=bucket,
        owner=owner,
        admin_config=paths.MODELS_OWNER_CONFIG,
        timeout=timeout,
    )
    model.mirror_read_policy(
        name=f"Bucket {bucket} read-only for {reader}",
        bucket=bucket,
        reader=reader,
        owner_config=paths.MODELS_OWNER_CONFIG,
    )
    for src in sources:
        prefix = src.mirror_prefix
        staging = f"{paths.MODELS_UPLOAD_DIR}/{src.name}@{src.revision}"
        # Preflight refused a model that is neither in the mirror nor on the controller.
        if not memo.read(host, MirroredModel, bucket=bucket, prefix=prefix, timeout=timeout):
            files.sync(
                name=f"Upload {src.mirror_from} for the mirror",
                src=src.mirror_from,
                dest=staging,
                delete=True,
            )
        model.mirrored(
            name=f"Model {src.name}@{src.revision} in s3://{bucket}/{prefix}",
            bucket=bucket,
            prefix=prefix,
            directory=staging,
            script=paths.MIRROR_SCRIPT,
            owner_config=paths.MODELS_OWNER_CONFIG,
            timeout=timeout,
        )
