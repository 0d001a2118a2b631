"""A connection lost mid-command reads as the SSH error pyinfra handles (host fails alone)."""

import io

import pytest
from paramiko import SFTPClient, SSHException
from pyinfra.connectors.ssh import SSHConnector

from deploys import compat


class Host:
    name = "gpu2"

    def __str__(self):
        return self.name


def connector(**attributes) -> SSHConnector:
    """An SSH connector for gpu2 without a connection: only what the tested path reads."""
    made = SSHConnector.__new__(SSHConnector)
    made.host = Host()
    for name, value in attributes.items():
        setattr(made, name, value)
    return made


def test_eoferror_from_paramiko_becomes_sshexception(monkeypatch):
    def dies(self, *args, **kwargs):
        raise EOFError()

    monkeypatch.setattr(SSHConnector, "run_shell_command", dies)
    compat.install()
    compat.install()  # idempotent: wrapped once

    with pytest.raises(SSHException, match="connection to gpu2 lost"):
        SSHConnector.run_shell_command(connector(), "true")
    assert SSHConnector.run_shell_command.__wrapped__ is dies


def test_sftp_channel_lost_while_opening_becomes_sshexception(monkeypatch):
    # The CI failure of 2026-12-03: gpu2 powered off as pyinfra opened SFTP for a put_file;
    # paramiko's "EOF during negotiation" became pyinfra's ConnectError, which aborted the run.
    def eof_during_negotiation(transport):
        raise SSHException("EOF during negotiation")

    monkeypatch.setattr(SFTPClient, "from_transport", eof_during_negotiation)
    compat.install()

    class Client:
        def get_transport(self):
            return object()

    lost = connector(client=Client(), data={"ssh_file_transfer_protocol": "sftp"})
    with pytest.raises(SSHException, match=r"Unable to establish SFTP.*EOF during negotiation"):
        lost.put_file(io.BytesIO(b"x"), "/etc/kvceph/lmcache.yaml")
