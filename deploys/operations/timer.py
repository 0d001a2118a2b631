"""A systemd timer enabled and started with one bounded ``systemctl`` call (pyinfra's
``systemd.service`` runs its changes unbounded: a hung systemd would hang the deploy). The
state is read with pyinfra's own facts."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus


@operation()
def started(unit: str):
    """
    Enable a timer at boot and start it now (``systemctl enable --now``), unless it is both.

    + unit: the ``.timer`` unit
    """
    running = host.get_fact(SystemdStatus, services=unit).get(unit)
    enabled = host.get_fact(SystemdEnabled, services=unit).get(unit)
    if running and enabled:
        host.noop(f"{unit} is enabled and waiting")
        return
    yield StringCommand("timeout 60 systemctl enable --now", QuoteString(unit))
