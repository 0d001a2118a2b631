"""Work-arounds for pyinfra 3.10 behaviour that would break kvceph's safety guarantees.

A host lost mid-run must fail alone. pyinfra handles ``OSError``/``SSHException`` from a
command as a failed host, but paramiko raises a bare ``EOFError`` when the transport dies while
a channel opens; pyinfra lets that escape, and the whole run aborts with an internal error.
A host lost while pyinfra opens its SFTP channel surfaces as pyinfra's own ``ConnectError``
("Unable to establish SFTP connection", from paramiko's "EOF during negotiation"), which the
operation runner does not catch either: the run aborted that way in CI (2026-12-03). The SSH
connector is wrapped so that both read as the ``SSHException`` pyinfra already handles.

This patches pyinfra's SSH connector: pyinfra has no API to map a connector's exceptions (no
connector hook, no setting), and the upstream report is open (pyinfra-dev/pyinfra#1220). So
pyinfra is pinned exactly (pyproject.toml), and tests/unit/test_pyinfra_pin.py fails when any
of ``RELIES_ON`` differs from what this work-around was written against.
"""

from __future__ import annotations

import functools

from paramiko import SSHException
from pyinfra.api.exceptions import ConnectError
from pyinfra.connectors.ssh import SSHConnector

_WRAPPED = ("run_shell_command", "put_file", "get_file")
# pyinfra code whose behaviour the wrapper assumes: the wrapped methods, the SFTP connect that
# raises ConnectError, and the operation runner that fails one host on an SSHException.
RELIES_ON = (
    *(f"pyinfra.connectors.ssh:SSHConnector.{name}" for name in _WRAPPED),
    "pyinfra.connectors.ssh:SSHConnector.get_file_transfer_connection",
    "pyinfra.api.operations:_run_host_op",
)


def _lost_connection_is_ssh_error(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except EOFError as exc:
            raise SSHException(f"connection to {self.host.name} lost ({exc!r})") from exc
        except ConnectError as exc:
            # Only a file transfer opens a channel that raises this after the connect.
            raise SSHException(f"{exc} (cause: {exc.__cause__!r})") from exc

    wrapper.__kvceph_wrapped__ = True
    return wrapper


def install() -> None:
    """Wrap the SSH connector once (idempotent)."""
    for name in _WRAPPED:
        method = getattr(SSHConnector, name)
        if not getattr(method, "__kvceph_wrapped__", False):
            setattr(SSHConnector, name, _lost_connection_is_ssh_error(method))
