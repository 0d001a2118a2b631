"""deploys/ has no import cycle and no import inside a function that runs back up the graph.

Reads every ``import`` / ``from ... import`` of deploys/ with ``ast`` (module level and inside
functions), resolves them to modules of deploys/ (``from deploys.x import y`` counts ``x`` and,
when ``y`` is a module, ``x.y``; a package counts its ``__init__``), and checks the graph.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOYS = ROOT / "deploys"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(DEPLOYS.rglob("*.py")) if "remote" not in p.parts}


def _targets(node: ast.AST, known: set[str], here: str) -> set[str]:
    found: set[str] = set()
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            pkg = here.split(".")[: -node.level] if not here.endswith("__init__") else here
            base = ".".join([*pkg, *([base] if base else [])])
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    else:
        return found
    for name in names:
        parts = name.split(".")
        # importing a.b.c runs a, a.b and a.b.c
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in known and prefix != here:
                found.add(prefix)
    return found


@functools.cache
def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> modules it imports at module level, module -> modules imported in functions)."""
    mods = modules()
    known = set(mods)
    top: dict[str, set[str]] = {m: set() for m in mods}
    inner: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                in_function = _in_function(tree, node)
                guarded = _under_type_checking(tree, node)
                if guarded:
                    continue
                (inner if in_function else top)[name] |= _targets(node, known, name)
    # A package's module imports its parents' __init__ implicitly: not a dependency edge.
    for name in top:
        top[name] = {t for t in top[name] if not name.startswith(t + ".")}
        inner[name] = {t for t in inner[name] if not name.startswith(t + ".")}
    return top, inner


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


_PARENTS: dict[int, dict] = {}


def _chain(tree: ast.AST, node: ast.AST):
    if id(tree) not in _PARENTS:
        _PARENTS[id(tree)] = _parents(tree)
    parents = _PARENTS[id(tree)]
    while node in parents:
        node = parents[node]
        yield node


def _in_function(tree, node) -> bool:
    return any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in _chain(tree, node))


def _under_type_checking(tree, node) -> bool:
    return any(
        isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test) for p in _chain(tree, node)
    )


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        if v == goal:
            return True
        if v not in seen:
            seen.add(v)
            todo.extend(edges.get(v, ()))
    return False


def test_no_import_cycle_in_deploys():
    top, inner = graph()
    assert len(top) > 50  # the walk found the tree
    assert cycles(top) == []
    # With function-level imports counted too, still none.
    both = {m: top[m] | inner[m] for m in top}
    assert cycles(both) == []


def test_no_import_inside_a_function_runs_back_up():
    top, inner = graph()
    back = [f"{m} -> {t}" for m in inner for t in inner[m] if reaches(top, t, m)]
    assert back == []


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert reaches({"a": {"b"}, "b": {"c"}}, "a", "c")
