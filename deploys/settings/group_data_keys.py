"""The group_data files' keys, refused at inventory time: before pyinfra connects to any host.

pyinfra loads the inventory file, then every ``group_data/*.py``, then connects to all hosts;
the deploy's preflight (``settings.load``) runs only after that. A misspelled ``kvceph_*`` key
or a secret in a group_data file is the file's fault, not a host's: the inventory file calls
:func:`check` so the run stops in one line naming the file and the line that holds the key, as
pyinfra's own "pyinfra error in FILE line N" prefix (the error is raised at that line), with no
host touched. The preflight still checks every host's merged data (the inventory's own host
data and ``--data``).
"""

from __future__ import annotations

import ast
import os
import runpy
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyinfra.api.exceptions import PyinfraError

from deploys.settings import keys, secret_names
from deploys.settings.secrets import MECHANISM


class GroupDataKeyError(PyinfraError):
    """A refused key of a group_data file; ``path`` and ``line`` say where it is set."""

    def __init__(self, message: str, path: Path, line: int | None):
        super().__init__(message)
        self.path, self.line = path, line


def folders(inventory_file: str, argv: list[str] | None = None) -> list[Path]:
    """The group_data folders pyinfra reads, in its order: ``./group_data``, the inventory's
    ``group_data`` when it is elsewhere, then each ``--group-data`` of the command line."""
    argv = sys.argv if argv is None else argv
    found = [Path.cwd() / "group_data"]
    beside = Path(inventory_file).resolve().parent
    if str(beside) != os.getcwd():
        found.append(beside / "group_data")
    for i, arg in enumerate(argv):
        if arg == "--group-data" and i + 1 < len(argv):
            found.append(Path(argv[i + 1]))
        elif arg.startswith("--group-data="):
            found.append(Path(arg.split("=", 1)[1]))
    return found


def assigned_lines(source: str) -> dict[str, int]:
    """Each module-level name a group_data file assigns, and the line of its first assignment
    (inside ``if``/``try``/``with`` blocks too: they run at import)."""
    lines: dict[str, int] = {}
    blocks = (ast.If, ast.Try, ast.With, ast.For, ast.While)

    def visit(body: Iterable[ast.stmt]) -> None:
        for node in body:
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        lines.setdefault(name.id, node.lineno)
            if isinstance(node, blocks):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    visit(getattr(node, field, []) or [])
            elif isinstance(node, ast.ExceptHandler):
                visit(node.body)

    visit(ast.parse(source).body)
    return lines


def _why(key: str) -> tuple[str, str] | None:
    if key in secret_names.GROUP_DATA_SECRETS:
        return "secrets must not live in group_data (it is committed)", MECHANISM
    return keys.refusal(key)


def _raise_at(error: GroupDataKeyError) -> None:
    # pyinfra names the innermost frame outside itself ("pyinfra error in FILE line N"): raise
    # from a code object compiled at the key's file and line, as jinja2 does for templates.
    if error.line is None:
        raise error
    code = compile("\n" * (error.line - 1) + "raise error", str(error.path), "exec")
    exec(code, {"error": error})


def _shown(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def check(inventory_file: str, hosts_of: Mapping[str, list[str]], argv=None) -> None:
    """Refuse the first bad key of any group_data file pyinfra will load (one line, at its line).

    + inventory_file: the inventory's own path (``__file__``), for pyinfra's folder rule
    + hosts_of: group -> its hosts, for the message (a group without hosts says so)
    """
    for folder in folders(inventory_file, argv):
        for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
            source = path.read_text()
            where = assigned_lines(source)
            names = runpy.run_path(str(path))
            for key in sorted(k for k in names if not k.startswith("__")):
                why = _why(key)
                if why is None or key not in where:  # an imported name is no group data
                    continue
                hidden = key in secret_names.GROUP_DATA_SECRETS
                value = "***" if hidden or secret_names.looks_secret_key(key) else names[key]
                members = ", ".join(hosts_of.get(path.stem, [])) or "no hosts"
                shown = _shown(path)
                _raise_at(
                    GroupDataKeyError(
                        f"kvceph: group {path.stem} ({members}): {key} = {value!r}: {why[0]}; "
                        f"fix: {why[1]}",
                        shown,
                        where[key],
                    )
                )


def groups_of(inventory_globals: Mapping[str, object], inventory_file: str) -> dict[str, list[str]]:
    """group -> hosts of an inventory module's globals (pyinfra's rule: a public list of host
    names or (name, data) tuples), with the file's own group (every host) and ``all``."""
    groups: dict[str, list[str]] = {}
    for name, value in inventory_globals.items():
        if name.startswith("_") or not isinstance(value, list | tuple):
            continue
        hosts = [h[0] if isinstance(h, tuple) else h for h in value]
        if hosts and all(isinstance(h, str) for h in hosts):
            groups[name] = hosts
    every = list(dict.fromkeys(h for hosts in groups.values() for h in hosts))
    groups.setdefault(Path(inventory_file).stem, every)
    groups.setdefault("all", every)
    return groups
