#!/usr/bin/env python3
"""The variants a loan renders, as data beside its plan (issue 55 item 5).

    variants.py list                  every variant of every plan, one per line (name, inventory)
    variants.py render OUT [EXTRA..]  render them all into OUT/<name>/ (ship.sh)

Each plan ``planNNN.txt`` has ``planNNN.variants`` beside it: one line per variant its steps
name, ``NAME [inventory=FILE] key=value ...`` (shell quoting; ``$DEF`` stands for the tokens of
a definition in ``defs.variants``: ``DEF = key=value ...``, shared by the plans). ``inventory``
names the inventory file beside render.py (default ``h200.py``). A name in several plans is
rendered once; two plans that give one name different settings are refused. EXTRA: more
``key=value`` overrides for every variant (the CPU dry run's ports: ``H200_RENDER_EXTRA``).
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFS = HERE / "defs.variants"


@dataclass(frozen=True)
class Variant:
    """One rendered configuration: its name, inventory and render.py overrides."""

    name: str
    inventory: str
    args: tuple[str, ...]
    plan: str  # the variants file that named it first


class VariantError(ValueError):
    pass


def _lines(text: str):
    """The lines that say something: (number, text), no blanks or comments."""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield n, line


def definitions(text: str, where: str = "defs.variants") -> dict[str, list[str]]:
    """``NAME = tokens...`` lines; a definition may use the ones above it."""
    out: dict[str, list[str]] = {}
    for n, line in _lines(text):
        name, eq, rest = line.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier() or " " in name:
            raise VariantError(f"{where}:{n}: not a definition (NAME = key=value ...): {line}")
        out[name] = expand(shlex.split(rest, comments=True), out, f"{where}:{n}")
    return out


def expand(tokens: list[str], defs: dict[str, list[str]], where: str) -> list[str]:
    """``tokens`` with each ``$NAME`` replaced by its definition's tokens."""
    out = []
    for t in tokens:
        if t.startswith("$"):
            if t[1:] not in defs:
                raise VariantError(f"{where}: {t} is not defined in defs.variants")
            out.extend(defs[t[1:]])
        else:
            out.append(t)
    return out


def parse(text: str, defs: dict[str, list[str]], where: str) -> list[Variant]:
    """One variants file: ``NAME [inventory=FILE] key=value ...`` per line."""
    out = []
    for n, line in _lines(text):
        tokens = expand(shlex.split(line, comments=True), defs, f"{where}:{n}")
        name, args = tokens[0], tokens[1:]
        inventory = "h200.py"
        if args and args[0].startswith("inventory="):
            inventory = args.pop(0).split("=", 1)[1]
        bad = [a for a in args if "=" not in a]
        if bad or not name.replace("-", "").isalnum():
            raise VariantError(f"{where}:{n}: not NAME key=value ...: {line}")
        out.append(Variant(name, inventory, tuple(args), where))
    return out


def load(here: Path = HERE) -> list[Variant]:
    """Every plan's variants, each name once, in the plans' order (plan.txt first)."""
    defs = definitions((here / "defs.variants").read_text())
    files = sorted(here.glob("plan*.variants"), key=lambda p: (p.name != "plan.variants", p.name))
    seen: dict[str, Variant] = {}
    for f in files:
        for v in parse(f.read_text(), defs, f.name):
            old = seen.get(v.name)
            if old is None:
                seen[v.name] = v
            elif (old.inventory, old.args) != (v.inventory, v.args):
                raise VariantError(
                    f"{f.name}: variant {v.name} differs from {old.plan}'s: one name, one "
                    "configuration (rename one)"
                )
    return list(seen.values())


def of_plan(plan: Path) -> list[Variant]:
    """The variants a plan's own file names (``planNNN.variants`` beside ``planNNN.txt``)."""
    defs = definitions((plan.parent / "defs.variants").read_text())
    f = plan.with_suffix(".variants")
    return parse(f.read_text(), defs, f.name) if f.exists() else []


def render_all(out: str, extra: list[str]) -> None:
    """Render every variant with render.py, in process, as ship.sh's calls did one by one."""
    import render

    for v in load():
        render.INVENTORY = HERE / v.inventory
        os.environ["H200_INVENTORY"] = v.inventory
        if render.main([out, v.name, *v.args, *extra]) != 0:
            raise SystemExit(f"variants.py: {v.name} did not render")


def main(argv: list[str]) -> int:
    """``list`` or ``render OUT [EXTRA...]``."""
    if argv[:1] == ["list"]:
        for v in load():
            print(v.name, v.inventory, v.plan)
        return 0
    if argv[:1] == ["render"] and len(argv) >= 2:
        render_all(argv[1], argv[2:])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
