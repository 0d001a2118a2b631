"""A fact read once per run while nothing has changed on any host.

pyinfra 3.10 keeps no fact cache (``host.get_fact`` runs the fact's command every time), so
each operation that needs a fact reads it anew: ceph1's ``osd pool ls`` five times per run,
``ceph versions`` three times (about 1 s per ``ceph`` start, serial on one host), the engine's
unit state by three operations; and a run without ``-y`` runs every operation's body twice (to
show the plan, then to execute), reading everything twice (bench/README.md).

``read`` returns the value read earlier in this run while no operation has executed a command
on any host since: nothing kvceph manages can have changed in between, apart from what the run
lock keeps out. Once any operation ran a command, the next read goes to the host again, as
before. So the plan pyinfra prints and the decision it executes come from the same read.

Only facts that describe state go through here, read at an operation's start (before it
yields). Facts that measure a moment or poll (readiness, TLS handshakes, S3 reachability)
always go to the host.

``first`` returns the run's first answer instead, for a plan that must come from one read
before anything changed even where it runs after changes (the prune after the roll).

"Has any operation executed a command" is read from pyinfra's run state (``State.ops``, each
op's ``operation_meta.executed``): pyinfra has no public counter of it, and its callbacks fire
before the op's commands are recorded. So pyinfra is pinned exactly (pyproject.toml), and
tests/unit/test_pyinfra_pin.py fails when any of ``RELIES_ON`` differs from the code read here.
"""

from __future__ import annotations

import copy
import weakref

from pyinfra.api.state import State

# Per run (pyinfra State) -> (host name, fact, arguments) -> (commands-executed token, value).
# Not on the host object: operations see ``pyinfra.host``, a proxy shared by every host.
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Per run -> (host name, fact, arguments) -> the value of the run's first read.
_FIRST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# pyinfra code this module assumes: the run state's ops table, an op's meta, its "executed",
# where the op runner completes it, and a fact read that keeps no cache of its own.
RELIES_ON = (
    "pyinfra.api.state:State.init",
    "pyinfra.api.state:StateOperationHostData",
    "pyinfra.api.operation:OperationMeta.set_complete",
    "pyinfra.api.operation:OperationMeta.executed",
    "pyinfra.api.operations:_run_host_op",
    "pyinfra.api.facts:_get_fact",
)


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
    value = host.get_fact(fact, **kwargs)
    memo[key] = (token, copy.deepcopy(value))
    _FIRST.setdefault(state, {}).setdefault(key, copy.deepcopy(value))
    return value


def first(host, fact, **kwargs):
    """The value of this run's first read of the fact (``read`` now where there was none).

    + host: the pyinfra host the fact is read on
    + fact: the fact class
    + kwargs: the fact's arguments

    For an operation that plans from the host as the run found it although commands ran since
    (the prune after the roll: a read then sees the roll's switched links, not what the
    engines ran before). Returns a copy.
    """
    state = getattr(host, "state", None)
    if not isinstance(state, State):
        return host.get_fact(fact, **kwargs)
    kept = _FIRST.get(state, {}).get(_key(host, fact, kwargs))
    if kept is None:
        return read(host, fact, **kwargs)
    return copy.deepcopy(kept)


def _key(host, fact, kwargs: dict) -> tuple:
    return (host.name, fact, repr(sorted(kwargs.items())))
