"""Stage 3b "Model weights": a mirrored model is pulled onto the host before its engine starts.

Only for ``kvceph_model_source mirror``: the host reads the mirror bucket with the read-only
key, checks every file against the manifest's sha256, and renames the download into the fixed
directory the engine serves (docs/design.md "Model weights"). ``hub`` needs nothing here;
``path`` was checked by preflight (config.json on every host).
"""

from __future__ import annotations

from pyinfra.api import deploy

from deploys import paths
from deploys.operations import files, model
from deploys.settings import HostSettings
from deploys.settings.secrets import Secret
from deploys.stages import s3_tier

PULL_JOBS = 8


def reader_config(me: HostSettings, credentials) -> Secret:
    """The read-only key's INI (root 0600): the mirror as this host reaches the KV bucket."""
    keys = (credentials.models_access_key, credentials.models_secret_key)
    what = "kvceph: the model mirror's read-only key"
    return Secret(s3_tier.s3_ini(what, me.s3.endpoint, me.s3.region, *keys))


@deploy("Model weights")
def apply(me: HostSettings, checked) -> None:
    src = me.engine.source
    if src.source != "mirror":
        return
    files.helper_script("Model mirror helper", paths.MIRROR_SCRIPT, paths.MIRROR_SOURCE.read_text())
    files.private_file(
        name=f"Model mirror key {paths.MODELS_READER_CONFIG}",
        path=paths.MODELS_READER_CONFIG,
        content=reader_config(me, checked.credentials),
    )
    model.staged(
        name=f"Model {src.name}@{src.revision} in {src.path}",
        path=src.path,
        bucket=src.mirror_bucket,
        prefix=src.mirror_prefix,
        script=paths.MIRROR_SCRIPT,
        config=paths.MODELS_READER_CONFIG,
        python=f"{me.engine.venv}/bin/python",
        jobs=PULL_JOBS,
    )
