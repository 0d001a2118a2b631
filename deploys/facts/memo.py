"""A fact read once per run while nothing has changed on any host.

pyinfra 3.10 keeps no fact cache (``host.get_fact`` runs the fact's command every time), so
each operation that needs a fact reads it anew: ceph1's ``osd pool ls`` five times per run,
``ceph versions`` three times (about 1 s per ``ceph`` start, serial on one host), the engine's
unit state by three operations; and a run without ``-y`` runs every operation's body twice (to
show the plan, then to execute), reading everything twice (README "Performance").

``read`` returns the value read earlier in this run while no operation has executed a command
on any host since: nothing kvceph manages can have changed in between, apart from what the run
lock keeps out. Once any operation ran a command, the next read goes to the host again, as
before. So the plan pyinfra prints and the decision it executes come from the same read.

Only facts that describe state go through here, read at an operation's start (before it
yields). Facts that measure a moment or poll (readiness, TLS handshakes, S3 reachability)
always go to the host.

``prefetch`` fills the memo before the first operation: every state fact a host's stages will
read, in one command per host, the facts' own commands running side by side there. One
round trip instead of one per fact, and ceph1's ``ceph`` clients (about 0.4 s each, mostly
interpreter start) overlap instead of queueing. A read that was not prefetched simply goes to
the host; a prefetched value is used under the same rule as any other (nothing executed since).
"""

from __future__ import annotations

import copy
import re
import secrets
import weakref

from paramiko import SSHException
from pyinfra import logger
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.command import StringCommand
from pyinfra.api.facts import _MISSING_COMMAND_MARKER, _handle_fact_kwargs, _make_command
from pyinfra.api.state import State

# Per run (pyinfra State) -> (host name, fact, arguments) -> (commands-executed token, value).
# Not on the host object: operations see ``pyinfra.host``, a proxy shared by every host.
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _commands_executed(state: State) -> int:
    """How many operations, on all hosts, have run at least one command so far."""
    return sum(
        1
        for host_ops in state.ops.values()
        for data in host_ops.values()
        if data.operation_meta.executed
    )


def read(host, fact, **kwargs):
    """``host.get_fact(fact, **kwargs)``, from this run's earlier read while nothing executed.

    + host: the pyinfra host the fact is read on
    + fact: the fact class
    + kwargs: the fact's arguments (part of the key: other arguments, another read)

    Returns a copy, so a caller changing the value cannot change a later caller's.
    """
    state = getattr(host, "state", None)
    if not isinstance(state, State):
        # pyinfra-testing's FakeState/FakeHost: facts come from the fixture, nothing to keep.
        return host.get_fact(fact, **kwargs)
    key = _key(host, fact, kwargs)
    token = _commands_executed(state)
    memo = _KEPT.setdefault(state, {})
    kept = memo.get(key)
    if kept is not None and kept[0] == token:
        return copy.deepcopy(kept[1])
    if token == 0 and state in _PREFETCHED:
        # Nothing has run yet, so prefetch should have had it: a gap in deploys/prefetch.py.
        logger.debug("kvceph: fact not prefetched on %s: %s %s", host.name, fact.__name__, key[2])
    value = host.get_fact(fact, **kwargs)
    memo[key] = (token, copy.deepcopy(value))
    return value


def _key(host, fact, kwargs: dict) -> tuple:
    return (host.name, fact, repr(sorted(kwargs.items())))


# Runs whose memo prefetch filled (for the debug line on a read it missed).
_PREFETCHED: weakref.WeakSet = weakref.WeakSet()


_BATCH_START = "d=$(mktemp -d) || exit 1\n"
_PART_END = re.compile(r'\n\) >"\$d/o(\d+)" 2>/dev/null </dev/null; echo \$\? >"\$d/r\1"')


def _part(i: int, command: str) -> str:
    # The newline before ")" ends a part that ends in a comment or a here-document.
    return f'( {command}\n) >"$d/o{i}" 2>/dev/null </dev/null; echo $? >"$d/r{i}"'


def batch_command(commands: list[str], marker: str, lanes: list[str | None] | None = None) -> str:
    """One shell command that runs ``commands`` side by side and prints each one's output
    after a ``<marker> <index> <exit status>`` line, in order (stderr is dropped, as a fact's
    is). Output without a final newline gets one, so the next marker starts its own line.

    ``lanes``: per command, None (runs beside all others) or a name: commands of one lane run
    one after another, in order, beside the rest.
    """
    jobs: dict[object, list[str]] = {}
    for i, command in enumerate(commands):
        lane = lanes[i] if lanes and lanes[i] is not None else ("own", i)
        jobs.setdefault(lane, []).append(_part(i, command))
    lines = [_BATCH_START.rstrip("\n")]
    lines += ["{ " + ";\n  ".join(parts) + "; } &" for parts in jobs.values()]
    lines.append("wait")
    lines.append(
        f"for i in {' '.join(str(i) for i in range(len(commands)))}; do "
        f'echo "{marker} $i $(cat "$d/r$i")"; cat "$d/o$i"; '
        'if [ -s "$d/o$i" ] && [ -n "$(tail -c 1 "$d/o$i")" ]; then echo; fi; '
        'rm -f "$d/o$i" "$d/r$i"; done'
    )
    lines.append('rmdir "$d"')
    return "\n".join(lines)


def batch_parts(command: str) -> tuple[str, list[str]] | None:
    """``batch_command``'s (marker, commands) from its text, or None for another command
    (a stand-in host answering each part as it would alone: tests/inventories/fake_facts.py)."""
    found = re.search(r'^for i in ([0-9 ]*); do echo "(\S+) \$i ', command, re.M)
    if not command.startswith(_BATCH_START) or not found:
        return None
    parts: dict[int, str] = {}
    pos = len(_BATCH_START)
    while True:
        # The separators batch_command writes before a part: a new job, or the next in a lane.
        for opener in ("{ ( ", ";\n  ( ", "; } &\n{ ( "):
            if command.startswith(opener, pos):
                pos += len(opener)
                break
        else:
            break
        end = _PART_END.search(command, pos)
        if end is None:
            return None
        parts[int(end.group(1))] = command[pos : end.start()]
        pos = end.end()
    count = len(found.group(1).split())
    if sorted(parts) != list(range(count)):
        return None
    return found.group(2), [parts[i] for i in range(count)]


def split_batch(lines: list[str], marker: str, count: int) -> list[tuple[int, list[str]] | None]:
    """``batch_command``'s output -> per command (exit status, stdout lines), None if absent."""
    out: list[tuple[int, list[str]] | None] = [None] * count
    current = None
    for line in lines:
        parts = line.split(" ")
        if len(parts) == 3 and parts[0] == marker and parts[1].isdigit():
            index = int(parts[1])
            if 0 <= index < count and parts[2].lstrip("-").isdigit():
                current = out[index] = (int(parts[2]), [])
                continue
            current = None  # a torn marker: that command's output is not trusted
            continue
        if current is not None:
            current[1].append(line)
    return out


def prefetch(host, reads: list[tuple[type, dict]], lanes: dict[type, str] | None = None) -> int:
    """Read ``reads`` (fact class, arguments) on the host in one command into the memo.

    ``lanes``: fact class -> lane name; facts of one lane are read one after another (a
    service that should not answer them at once), the others all side by side.

    Each value is what ``host.get_fact`` would return for the same command output: the fact's
    ``default()`` when its command failed or printed nothing. A fact whose client is missing
    (``requires_command``) or whose output does not parse is left out: the operation's own
    read reports it as usual. Returns how many values were kept.
    """
    state = getattr(host, "state", None)
    if not isinstance(state, State) or not reads:
        return 0
    lanes = lanes or {}
    facts, commands, global_kwargs = [], [], {}
    for cls, kwargs in reads:
        fact = cls()
        fact_kwargs, global_kwargs = _handle_fact_kwargs(state, host, cls, None, dict(kwargs))
        command = _make_command(fact.command, fact_kwargs)
        required = _make_command(fact.requires_command, dict(fact_kwargs))
        text = _shell(command)
        if required:
            text = (
                f"if command -v {_shell(required)} >/dev/null 2>&1; then ( {text}\n); "
                f"else echo '{_MISSING_COMMAND_MARKER}'; fi"
            )
        facts.append((cls, kwargs, fact))
        commands.append(text)
    marker = f"@kvceph-batch-{secrets.token_hex(8)}"
    executor_kwargs = {k: v for k, v in global_kwargs.items() if k in CONNECTOR_ARGUMENT_KEYS}
    try:
        ok, output = host.run_shell_command(
            StringCommand(batch_command(commands, marker, [lanes.get(c) for c, _, _ in facts])),
            print_output=state.print_fact_output,
            print_input=state.print_fact_input,
            **executor_kwargs,
        )
    except (TimeoutError, OSError, SSHException) as exc:
        logger.debug("kvceph: prefetch on %s failed: %r", host.name, exc)
        return 0
    if not ok:
        return 0
    token = _commands_executed(state)
    memo = _KEPT.setdefault(state, {})
    kept = 0
    for (cls, kwargs, fact), result in zip(
        facts, split_batch(output.stdout_lines, marker, len(facts)), strict=True
    ):
        if result is None:
            continue
        status, lines = result
        if status == 0 and lines == [_MISSING_COMMAND_MARKER]:
            continue
        try:
            value = fact.process(lines) if status == 0 and lines else fact.default()
        except Exception:  # noqa: BLE001 - the op's own read reports it, as pyinfra does
            continue
        memo[_key(host, cls, kwargs)] = (token, copy.deepcopy(value))
        kept += 1
    _PREFETCHED.add(state)
    return kept


def _shell(command) -> str:
    if command is None:
        return ""
    return command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
