"""group_data files read outside a pyinfra run (the benchmark's peer, tests), as pyinfra does.

pyinfra executes each ``group_data/<group>.py`` and merges their names in group order, a later
group's value winning. Here the same, for code that needs a lab host's data without an
inventory: the files may read the environment, so ``environ`` stands in for the one the run
would get.
"""

from __future__ import annotations

import ast
import os
import runpy
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from deploys import paths
from deploys.settings.reader import SettingsError

ROOT = paths.TEMPLATES.parent / "group_data"


def lab_ceph(lab_dir: str) -> str:
    """The lab's Ceph (inventories/lab.py and group_data/lab.py must agree): KVCEPH_LAB_CEPH,
    else what the running lab recorded (lab/lab.sh up, ``<lab_dir>/ceph-mode``), else pacific.
    """
    try:
        recorded = open(f"{lab_dir}/ceph-mode").read().strip()
    except OSError:
        recorded = ""
    return os.environ.get("KVCEPH_LAB_CEPH") or recorded or "pacific"


def read(
    groups: Iterable[str],
    environ: Mapping[str, str] | None = None,
    keep: Callable[[str], bool] = lambda name: name.startswith("kvceph_"),
    root: Path = ROOT,
) -> dict:
    """The merged names of ``root/<group>.py`` for ``groups`` in order (missing files skipped).

    + groups: group names, lowest priority first (e.g. ``("all", "gpu", "lab")``)
    + environ: the environment the files see; None: this process's
    + keep: which names to return (the ``kvceph_*`` settings by default)
    + root: the group_data directory
    """
    data: dict = {}
    saved = dict(os.environ)
    try:
        if environ is not None:
            os.environ.clear()
            os.environ.update(environ)
        for name in groups:
            path = root / f"{name}.py"
            if path.exists():
                data.update({k: v for k, v in runpy.run_path(str(path)).items() if keep(k)})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return data


# pyinfra's own keys that carry a secret: fine from the environment (os.environ[...]), never
# as a literal in a committed file.
PYINFRA_SECRETS = ("ssh_password", "ssh_key_password", "_sudo_password", "_su_password")


INVENTORIES = ROOT.parent / "inventories"


def _literal_secrets(tree: ast.AST) -> Iterable[str]:
    """The :data:`PYINFRA_SECRETS` names ``tree`` gives a string literal: ``name = '...'``,
    ``{"name": '...'}`` (an inventory's host or group data) or ``dict(name='...')``."""

    def literal(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and literal(node.value):
            yield from (t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if literal(k) and literal(v):
                    yield k.value
        elif isinstance(node, ast.Call):
            yield from (kw.arg for kw in node.keywords if kw.arg and literal(kw.value))


def refuse_committed_secrets(root: Path = ROOT, inventories: Path = INVENTORIES) -> None:
    """One line when a ``group_data/*.py`` or ``inventories/*.py`` file gives one of
    :data:`PYINFRA_SECRETS` a string literal (assigned, or in a host's or group's data dict):
    both are committed, so the password would be in the repository.

    + root: the group_data directory
    + inventories: the inventories directory
    """
    for folder, label in ((root, "group_data"), (inventories, "inventories")):
        for path in sorted(folder.glob("*.py")):
            for name in _literal_secrets(ast.parse(path.read_text())):
                if name in PYINFRA_SECRETS:
                    raise SettingsError(
                        f"{label}/{path.name}: {name} = '***': a password in a "
                        "committed file; fix: remove it; use SSH keys (an agent), or read it "
                        "from the environment (os.environ[...]) in the inventory"
                    )
