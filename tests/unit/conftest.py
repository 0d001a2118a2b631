"""The unit tests' controller environment: never a lab's secrets or state.

`make` exports ``KVCEPH_SECRETS_FILE`` (the lab instance's secrets.env), and `make test` runs the
unit session beside the labs that write it: a lab's per-fleet hash seed or keys would then reach
the ``@fake`` plans, which expect the fake secrets only. Each test (and the pyinfra runs it
starts) sees no secrets file and no secret from the caller's environment, and an empty lab
directory (group_data/lab.py reads its measured figures from there, which verify.py writes).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from deploys.settings import secrets

_CALLERS = (secrets.FILE_ENV, *secrets.OPTIONAL, secrets.ACCESS_ENV, secrets.SECRET_ENV)


@pytest.fixture(autouse=True, scope="session")
def _no_lab_secrets(tmp_path_factory):
    saved = {k: v for k, v in os.environ.items() if k in _CALLERS or _secret_name(k)}
    for name in saved:
        del os.environ[name]
    lab_dir = os.environ.pop("KVCEPH_LAB_DIR", None)
    os.environ[secrets.FILE_ENV] = str(tmp_path_factory.mktemp("no-secrets") / "secrets.env")
    os.environ["KVCEPH_LAB_DIR"] = str(tmp_path_factory.mktemp("no-lab"))
    yield
    del os.environ[secrets.FILE_ENV], os.environ["KVCEPH_LAB_DIR"]
    os.environ.update(saved)
    if lab_dir is not None:
        os.environ["KVCEPH_LAB_DIR"] = lab_dir


def _secret_name(name: str) -> bool:
    return (
        name.startswith(("KVCEPH_S3_", "KVCEPH_MODELS_"))
        and name.endswith("_KEY")
        or (name.startswith(("KVCEPH_S3_ACCESS_KEY_", "KVCEPH_S3_SECRET_KEY_")))
    )


@pytest.fixture(scope="module")
def systemd_root(tmp_path_factory):
    """A root with systemd's own units (targets the unit depends on) for
    `systemd-analyze verify --root` (test_render.py, test_render_mp.py)."""
    root = tmp_path_factory.mktemp("root")
    for lib in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        if Path(lib).is_dir():
            shutil.copytree(lib, root / "usr/lib/systemd/system", symlinks=True)
            break
    (root / "etc/systemd/system").mkdir(parents=True)
    return root
