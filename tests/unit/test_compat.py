"""A connection lost mid-command reads as the SSH error pyinfra handles (host fails alone)."""

import pytest
from paramiko import SSHException
from pyinfra.connectors.ssh import SSHConnector

from deploys import compat


def test_eoferror_from_paramiko_becomes_sshexception(monkeypatch):
    def dies(self, *args, **kwargs):
        raise EOFError()

    monkeypatch.setattr(SSHConnector, "run_shell_command", dies)
    compat.install()
    compat.install()  # idempotent: wrapped once

    class Host:
        name = "gpu2"

    connector = SSHConnector.__new__(SSHConnector)
    connector.host = Host()
    with pytest.raises(SSHException, match="connection to gpu2 lost"):
        SSHConnector.run_shell_command(connector, "true")
    assert SSHConnector.run_shell_command.__wrapped__ is dies
