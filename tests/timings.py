"""Where a pytest session's minutes go: per-module and per-fixture seconds, printed at its end.

A plugin of its own (``-p timings``, `make test`'s sessions load it; ``tests`` is on pytest's
``pythonpath``), no download. Printed only when ``--durations`` is given, beside pytest's list
of the slowest steps, which hides every step below its cut and never adds a module up.
Per module: its tests' setup, call and teardown seconds (a session fixture's setup counts in
the module whose test first needed it, its teardown in the last one's). Per fixture: each
module-, class- or session-scoped fixture's own setup and teardown, where either took a second
or more (the lab's boot, the first converge, a module's deploy and its restore).
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

#: module path -> phase ("setup", "call", "teardown") -> seconds, and the test count
_PHASES: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
_TESTS: dict[str, int] = defaultdict(int)
#: (fixture name, scope, module that set it up) -> [setup s, teardown s]
_FIXTURES: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
#: id(fixturedef) -> (its key in _FIXTURES, when its teardown started)
_TEARING: dict[int, tuple[tuple[str, str, str], float]] = {}
#: a fixture whose setup and teardown together took less is not listed
FIXTURE_MIN_S = 1.0


#: the module of the test being run (a session fixture's request names no module)
_RUNNING = {"module": ""}


def _module(nodeid: str) -> str:
    """The module part of a test's node id (its file path)."""
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> None:
    """Note which module's test runs now, for the fixtures its setup starts.

    + item: the test about to run
    """
    _RUNNING["module"] = _module(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each test phase's seconds to its module's row.

    + report: pytest's report of one phase (setup, call or teardown) of one test
    """
    module = _module(report.nodeid)
    _PHASES[module][report.when] += report.duration
    if report.when == "setup":
        _TESTS[module] += 1


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef):
    """Time a wider-than-function fixture's setup, and arm the timing of its teardown.

    + fixturedef: the fixture being set up (in the module whose test runs now)
    """
    if fixturedef.scope == "function":
        return (yield)
    key = (fixturedef.argname, fixturedef.scope, _RUNNING["module"])
    started = time.monotonic()
    try:
        return (yield)
    finally:
        _FIXTURES[key][0] += time.monotonic() - started
        # Finalizers run last-added first: this one runs just before the fixture's own
        # teardown (added while it was set up), pytest_fixture_post_finalizer just after it.
        fixturedef.addfinalizer(
            lambda: _TEARING.__setitem__(id(fixturedef), (key, time.monotonic()))
        )


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef) -> None:
    """Add a timed fixture's teardown seconds.

    + fixturedef: the fixture just torn down
    """
    key, started = _TEARING.pop(id(fixturedef), (None, 0.0))
    if key is not None:
        _FIXTURES[key][1] += time.monotonic() - started


def _row(name: str, *seconds: float) -> str:
    """One table line: the seconds' sum, each of them, then the name."""
    return f"{sum(seconds):8.1f} " + " ".join(f"{s:8.1f}" for s in seconds) + f"  {name}"


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """The two tables, when ``--durations`` asked for pytest's own list.

    + terminalreporter: pytest's terminal writer
    + config: the session's config (its ``--durations``)
    """
    if config.option.durations is None or not _PHASES:
        return
    write = terminalreporter.write_line
    terminalreporter.section("seconds per module (all its tests, slowest first)")
    write(f"{'total':>8} {'setup':>8} {'call':>8} {'teardown':>8}  tests  module")
    rows = sorted(_PHASES.items(), key=lambda kv: -sum(kv[1].values()))
    for module, p in rows:
        times = (p["setup"], p["call"], p["teardown"])
        write(_row(f"{_TESTS[module]:5d}  {module}", *times))
    every = [sum(p[w] for p in _PHASES.values()) for w in ("setup", "call", "teardown")]
    write(_row(f"{sum(_TESTS.values()):5d}  (all)", *every))
    slow = [(k, v) for k, v in _FIXTURES.items() if sum(v) >= FIXTURE_MIN_S]
    if not slow:
        return
    terminalreporter.section(
        f"seconds per fixture (module, class or session scope, >= {FIXTURE_MIN_S:.0f} s)"
    )
    write(f"{'total':>8} {'setup':>8} {'teardown':>8}  fixture (scope) set up in module")
    for (name, scope, module), (up, down) in sorted(slow, key=lambda kv: -sum(kv[1])):
        write(_row(f"{name} ({scope}) in {module}", up, down))
