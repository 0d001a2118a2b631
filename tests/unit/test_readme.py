"""The README's group_data reference lists every setting the code reads: the same registry
(deploys/settings/keys.py) that refuses unknown kvceph_* keys."""

from pathlib import Path

from deploys import paths
from deploys.settings import keys

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented():
    known = keys.documented()
    assert "kvceph_tensor_parallel_size" in known and "kvceph_rotation" in known
    readme = (ROOT / "README.md").read_text()
    missing = sorted(k for k in known if k not in readme)
    assert not missing, f"README group_data reference lacks: {missing}"


def test_the_registry_leaves_out_only_literals_that_name_no_setting():
    assert paths.GUARD_MODULE in keys.NOT_SETTINGS
    assert not keys.NOT_SETTINGS & keys.known()
