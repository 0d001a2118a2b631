"""docs/design.md's layout table names every module under deploys/, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _layout_entries() -> set[str]:
    """The .py names of the Layout block, each with the deploys/ sub-directory it stands under."""
    text = (ROOT / "docs" / "design.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    entries: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, folder) of the lines above
    for line in block.splitlines():
        code = line.split("#", 1)[0].rstrip()
        if not code.strip():
            continue
        indent = len(code) - len(code.lstrip())
        folders = [(i, f) for i, f in folders if i < indent]
        words = [w.strip() for w in code.strip().split(",")]
        if len(words) == 1 and words[0].endswith("/"):
            folders.append((indent, words[0]))
            continue
        prefix = "".join(f for _, f in folders)
        entries |= {prefix + w for w in words if re.fullmatch(r"[\w.]+\.py", w)}
    return entries


def test_every_module_under_deploys_is_in_the_layout():
    modules = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "deploys").rglob("*.py")
        if p.name != "__init__.py" or p.parent.name == "settings"
    }
    missing = sorted(modules - _layout_entries())
    assert missing == [], f"docs/design.md Layout lacks: {missing}"


def test_the_layout_names_no_file_that_does_not_exist():
    stale = sorted(e for e in _layout_entries() if not (ROOT / e).is_file())
    assert stale == [], f"docs/design.md Layout names missing files: {stale}"
