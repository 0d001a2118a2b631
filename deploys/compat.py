"""Work-arounds for pyinfra 3.10 behaviour that would break kvceph's safety guarantees.

A host lost mid-run must fail alone. pyinfra handles ``OSError``/``SSHException`` from a
command as a failed host, but paramiko raises a bare ``EOFError`` when the transport dies while
a channel opens; pyinfra lets that escape, and the whole run aborts with an internal error. The
SSH connector is wrapped so that a lost connection reads as the ``SSHException`` pyinfra
already handles.
"""

from __future__ import annotations

import functools

from paramiko import SSHException
from pyinfra.connectors.ssh import SSHConnector

_WRAPPED = ("run_shell_command", "put_file", "get_file")


def _lost_connection_is_ssh_error(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except EOFError as exc:
            raise SSHException(f"connection to {self.host.name} lost ({exc!r})") from exc

    wrapper.__kvceph_wrapped__ = True
    return wrapper


def install() -> None:
    """Wrap the SSH connector once (idempotent)."""
    for name in _WRAPPED:
        method = getattr(SSHConnector, name)
        if not getattr(method, "__kvceph_wrapped__", False):
            setattr(SSHConnector, name, _lost_connection_is_ssh_error(method))
