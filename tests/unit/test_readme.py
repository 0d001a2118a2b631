"""The docs the operator reads: the group_data reference (docs/settings.md) lists every setting
the code reads, the same registry (deploys/settings/keys.py) that refuses unknown kvceph_* keys;
the README stays a front door; nothing refers outside the repository."""

import re
import subprocess
from pathlib import Path

from deploys import paths
from deploys.settings import keys

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented_in_the_settings_reference():
    known = keys.documented()
    assert "kvceph_tensor_parallel_size" in known and "kvceph_rotation" in known
    reference = (ROOT / "docs" / "settings.md").read_text()
    missing = sorted(k for k in known if f"`{k}" not in reference and f"{k}=" not in reference)
    assert not missing, f"docs/settings.md lacks: {missing}"


def test_the_registry_leaves_out_only_literals_that_name_no_setting():
    assert paths.GUARD_MODULE in keys.NOT_SETTINGS
    assert not keys.NOT_SETTINGS & keys.known()


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
