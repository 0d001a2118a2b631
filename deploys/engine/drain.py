"""Drain before every restart kvceph makes (deploy's roll, verify.py): commands and verdicts.

How the deploy signals the gate: over its SSH connection, as root, it runs
``remote/engine_drain.py`` on the host, which writes ``/run/kvceph/drain-<port>`` (a lease:
the Unix time the drain ends by itself) and polls the engine where its host reaches it
(``engine_address.local``: loopback for a wildcard bind) until it is idle.
The gate (``remote/engine_guard.py``) sees the file and refuses new requests (503 +
Retry-After; ``/health`` 503 "draining"). A file, not an admin route: only root can write
``/run/kvceph``, so no client, remote or local, can drain an engine, and nothing depends on
the API key (``/health`` and ``/metrics`` are open to loopback either way). ``/run`` is a
tmpfs: a reboot forgets every drain. The restart removes the file; the new process would
ignore it anyway (the gate honours only a file written after it started), and a deploy
killed mid-drain leaves a lease that ends by itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyinfra.api import QuoteString, StringCommand

from deploys import paths
from deploys.engine import engine_address

DRAIN_DIR = paths.DRAIN_DIR
SCRIPT = paths.DRAIN_SOURCE.read_text()
TIMEOUT_KEY = "kvceph_drain_timeout"
# The lease outlives the drain by the restart's own bound (systemctl restart's timeout 300 s)
# and a margin: it only matters when kvceph dies between drain and restart.
LEASE_MARGIN = 360


def drain_file(port: int) -> str:
    """The drain file the gate of the engine on ``port`` watches."""
    return f"{DRAIN_DIR}/drain-{int(port)}"


def command(python: str, port: int, timeout: int, bind: str = "0.0.0.0") -> StringCommand:
    """Drain the engine on ``port`` for at most ``timeout`` s; prints one JSON line.

    + python: an interpreter on the host (the engine venv's)
    + port: the engine's port
    + timeout: ``kvceph_drain_timeout``
    + bind: ``kvceph_vllm_bind``, the address the engine listens on
    """
    return StringCommand(
        "timeout",
        str(int(timeout) + 60),
        QuoteString(python),
        "-c",
        QuoteString(SCRIPT),
        str(int(port)),
        str(int(timeout)),
        str(int(timeout) + LEASE_MARGIN),
        QuoteString(DRAIN_DIR),
        QuoteString(engine_address.local_url(bind, port)),
    )


def restart_command(
    unit: str, port: int, timeout: int = 300, link: tuple[str, str] | None = None
) -> StringCommand:
    """``systemctl restart``, then the drain file goes (whatever the restart's outcome).

    ``reset-failed`` first: a unit that hit its start limit (a crash loop) refuses every start
    until its counter is reset, and the deploy is how an operator brings it back.

    + link: (the engine's venv link, the profile venv): switched right before the restart (a
      rename: atomic), and the venv touched (the prune keeps the newest)."""
    switch: list = []
    if link:
        new = f"{link[0]}.kvceph-new"
        switch = [
            "ln -sfn", QuoteString(link[1]), QuoteString(new), "&& mv -Tf", QuoteString(new),
            QuoteString(link[0]), "&& touch -c", QuoteString(link[1]), "|| exit 1;",
        ]  # fmt: skip
    return StringCommand(
        *switch,
        "timeout 60 systemctl reset-failed",
        QuoteString(unit),
        "2>/dev/null;",
        "timeout",
        str(int(timeout)),
        "systemctl restart",
        QuoteString(unit),
        "; rc=$?; rm -f",
        QuoteString(drain_file(port)),
        "; exit $rc",
    )


@dataclass(frozen=True)
class Result:
    """What the drain saw: ``state`` drained | timeout | down | no-gate | unhealthy | failed."""

    state: str
    seconds: float = 0.0
    gate: int = 0  # the gate's open requests at the end
    vllm: int = 0  # vLLM's running + waiting at the end

    @property
    def cut(self) -> int:
        """Requests the restart cuts: the larger count (each misses some the other sees: the
        gate those not yet scheduled, vLLM none of the gate's)."""
        return max(self.gate, self.vllm) if self.state in ("timeout", "no-gate") else 0


def parse(lines) -> Result:
    """The script's JSON line; ``failed`` when there is none (the drain did not run)."""
    for line in reversed(list(lines or ())):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "state" in found:
            return Result(
                str(found["state"]),
                float(found.get("seconds", 0)),
                int(found.get("gate", 0)),
                int(found.get("vllm", 0)),
            )
    return Result("failed")


def summary(result: Result, timeout: int) -> str:
    """One line for the restart's log: drained, or what the restart cuts and why."""
    if result.state == "drained":
        return f"drained in {result.seconds:.1f} s"
    if result.state == "down":
        return "not running: nothing to drain"
    if result.state == "timeout":
        return (
            f"drain timed out after {timeout} s ({TIMEOUT_KEY}): the restart cuts "
            f"{result.cut} request(s) (gate {result.gate} open, vLLM {result.vllm} "
            "running+waiting)"
        )
    if result.state == "no-gate":
        return (
            "the running gate does not drain (started before kvceph's drain): the restart "
            f"cuts {result.cut} request(s) vLLM has running+waiting"
        )
    if result.state == "unhealthy":
        return "engine not healthy (/health not 200): restarting without a drain"
    return "drain did not run (no answer from the drain script): restarting anyway"


def plan_note(guard: bool, timeout: int) -> str:
    """What the plan says about the drain before a restart."""
    if not guard:
        return "no drain (kvceph_vllm_guard is False: no gate to stop admitting requests)"
    return f"drains first (new requests 503, up to {timeout} s, {TIMEOUT_KEY})"
