"""The README's group_data reference lists every setting the code reads."""

import re
from pathlib import Path

from deploys import paths
from deploys.settings import secret_names

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented():
    code = "".join(p.read_text() for p in (ROOT / "deploys").rglob("*.py"))
    keys = set(re.findall(r'"(kvceph_[a-z0-9_]+)"', code))
    # refused (documented as such), and an internal marker in lifecycle rules
    # (and the engine gate's module name, which is no setting)
    keys -= {*secret_names.GROUP_DATA_SECRETS, "kvceph_untranslatable", paths.GUARD_MODULE}
    readme = (ROOT / "README.md").read_text()
    missing = sorted(k for k in keys if k not in readme)
    assert not missing, f"README group_data reference lacks: {missing}"
