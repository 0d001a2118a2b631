"""The README's group_data reference lists every setting the code reads: the same registry
(deploys/setting_keys.py) that refuses unknown kvceph_* keys."""

from pathlib import Path

from deploys import render, setting_keys

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented():
    keys = setting_keys.documented()
    assert "kvceph_tensor_parallel_size" in keys and "kvceph_rotation" in keys
    readme = (ROOT / "README.md").read_text()
    missing = sorted(k for k in keys if k not in readme)
    assert not missing, f"README group_data reference lacks: {missing}"


def test_the_registry_leaves_out_only_literals_that_name_no_setting():
    assert render.GUARD_MODULE in setting_keys.NOT_SETTINGS
    assert not setting_keys.NOT_SETTINGS & setting_keys.known()
