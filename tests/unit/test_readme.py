"""The docs the operator reads: the group_data reference lists every setting the code reads,
and the README stays a front door (what it is, how to start, where each step lives)."""

import importlib.util
import re
import subprocess
from pathlib import Path

from deploys import paths
from deploys.settings import run_control, secret_names

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented_in_the_settings_reference():
    code = "".join(p.read_text() for p in (ROOT / "deploys").rglob("*.py"))
    keys = set(re.findall(r'"(kvceph_[a-z0-9_]+)"', code)) | set(run_control.KEYS)
    # refused (documented as such), and an internal marker in lifecycle rules
    # (and the engine gate's module name, which is no setting)
    keys -= {*secret_names.GROUP_DATA_SECRETS, "kvceph_untranslatable", paths.GUARD_MODULE}
    # and Python packages' import names (kvceph_connector), which are no settings either
    keys = {k for k in keys if importlib.util.find_spec(k) is None}
    reference = (ROOT / "docs" / "settings.md").read_text()
    missing = sorted(k for k in keys if f"`{k}" not in reference and f"{k}=" not in reference)
    assert not missing, f"docs/settings.md lacks: {missing}"


def test_readme_is_short_and_links_the_reference():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in ("docs/settings.md", "docs/design.md", "hw/h200/README.md", "bench/README.md"):
        assert f"]({target})" in readme, target
        assert (ROOT / target).is_file(), target


# What a user of the project does not have: the workspace the project was made in.
OUTSIDE = re.compile(r"\.\./shared\b|/work/shared\b|\bshared/(seed|recipes|reference)/")


def test_nothing_refers_outside_the_repository():
    """No tracked file (product, docs, comments, tests) points at ../shared or the like."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    this = Path(__file__).resolve().relative_to(ROOT).as_posix()
    found = []
    for name in files:
        path = ROOT / name
        if not name or name == this or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [
            f"{name}:{n}: {line.strip()[:80]}"
            for n, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line)
        ]
    assert not found, "references outside the repository:\n" + "\n".join(found)
