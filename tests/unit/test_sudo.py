"""Root over a non-root login: the write path through pyinfra's real sudo upload, and the lock."""

import os
import subprocess
from types import SimpleNamespace

import pytest
from pyinfra.api import Config, FileUploadCommand, Inventory, State, StringCommand
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.context import ctx_host

from deploys import lock, sudo
from deploys.operations import files
from deploys.settings.reader import SettingsError

SECRET = "VLLM_API_KEY=s3cr3t\n"
TARGET = "/etc/kvceph/secrets.env"
TEMP = "/etc/kvceph/.secrets.env.kvceph-tmp"


def _hosts(config: Config | None = None):
    inventory = Inventory((["root1", ("sudo1", {"ssh_user": "deploy", "_sudo": True})], {}))
    state = State(inventory, config or Config())
    return state, inventory.get_host("root1"), inventory.get_host("sudo1")


def test_arguments_follow_host_data_and_the_sudo_flag():
    state, root1, sudo1 = _hosts()
    assert sudo.arguments(state, root1) == {}
    assert sudo.arguments(state, sudo1) == {"_sudo": True}
    flagged, root1, _ = _hosts(Config(SUDO=True))  # pyinfra --sudo
    assert sudo.arguments(flagged, root1) == {"_sudo": True}
    assert sudo.shell_line(state, root1, "echo 'a'") == "sh -c 'echo '\"'\"'a'\"'\"''"
    assert sudo.shell_line(state, sudo1, "true") == "sudo -H -n sh -c true"


def _replace_under(host, arguments):
    host.current_op_global_arguments = arguments
    with ctx_host.use(host):
        return list(files._replace(TARGET, SECRET, "root", "root", "0600"))


class Recorder(SSHConnector):
    """pyinfra's SSH connector with the wire recorded: SFTP writes and shell commands."""

    def __init__(self):  # no connection: only what put_file reads
        self.host = SimpleNamespace(name="sudo1")
        self.sftp, self.shell = [], []

    def _put_file(self, filename_or_io, remote_location):
        self.sftp.append((remote_location, filename_or_io.read().decode()))

    def run_shell_command(self, command, **arguments):
        self.shell.append((str(command), bool(arguments.get("_sudo"))))
        return True, SimpleNamespace(stderr="")


def test_a_secret_under_sudo_lands_only_in_the_private_upload_dir():
    _, _, sudo1 = _hosts()
    commands = _replace_under(sudo1, {"_sudo": True})
    text = [str(c) for c in commands if isinstance(c, StringCommand)]
    assert "umask 077" in text[0] and TEMP in text[0]
    # Then the private directory: 0700 and the login user's, in root's 0755 state dir.
    assert text[1] == (
        "sh -c 'mkdir -p -m 0755 /var/lib/kvceph && "
        'install -d -m 0700 -o "${SUDO_USER:-$(id -un)}" /var/lib/kvceph/upload\''
    )
    upload = next(c for c in commands if isinstance(c, FileUploadCommand))
    # Through pyinfra's own sudo upload: SFTP as the login user into the private dir, then
    # `sudo cp` into the root-owned 0600 temp file (cp keeps its mode), then the copy removed.
    wire = Recorder()
    assert wire.put_file(upload.src, upload.dest, upload.remote_temp_filename, _sudo=True)
    private = f"{sudo.UPLOAD_DIR}/etc%kvceph%.secrets.env.kvceph-tmp"
    assert wire.sftp == [(private, SECRET)]
    assert wire.shell == [(f"cp {private} {TEMP}", True), (f"rm -f {private}", False)]
    assert text[-3:] == [f"chown root:root {TEMP}", f"chmod 0600 {TEMP}", f"mv -f {TEMP} {TARGET}"]


def test_a_root_login_uploads_straight_into_the_temp_file():
    _, root1, _ = _hosts()
    commands = _replace_under(root1, {})
    upload = next(c for c in commands if isinstance(c, FileUploadCommand))
    wire = Recorder()
    assert wire.put_file(upload.src, upload.dest, upload.remote_temp_filename)
    assert wire.sftp == [(TEMP, SECRET)] and wire.shell == []
    assert not any("upload" in str(c) for c in commands if isinstance(c, StringCommand))


def _fake_sudo(tmp_path) -> dict:
    """PATH with a `sudo` that drops pyinfra's options and runs the rest (no root needed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text(
        '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nSUDO_USER=deploy exec "$@"\n'
    )
    (bin_dir / "sudo").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_the_lock_shell_runs_through_sudo_and_frees_on_eof(tmp_path):
    state, _, sudo1 = _hosts()
    env = _fake_sudo(tmp_path)
    lock_dir = str(tmp_path / "lock")
    line = sudo.shell_line(state, sudo1, lock.lock_script("owner=a\npid=1", lock_dir))
    assert line.startswith("sudo -H -n sh -c ")
    first = subprocess.Popen(
        ["bash", "-c", line], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert first.stdout.readline().strip() == "LOCKED"
    second = subprocess.run(
        ["bash", "-c", line], input="", capture_output=True, text=True, env=env, timeout=10
    )
    assert second.returncode == lock.HELD_EXIT and second.stdout.startswith("HELD\n")
    assert "owner=a\npid=1\nremote_pid=" in second.stdout
    first.stdin.close()  # the channel closes: the lock is free again
    first.wait(timeout=10)
    third = subprocess.Popen(
        ["bash", "-c", line], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert third.stdout.readline().strip() == "LOCKED"
    third.stdin.close()
    third.wait(timeout=10)


def test_a_sudo_password_in_host_data_is_refused_before_any_host_is_touched():
    inventory = Inventory((["gpu1", ("gpu2", {"_sudo": True, "_sudo_password": "pw"})], {}))
    with pytest.raises(SettingsError, match=r"^gpu2: _sudo_password: .*fix: passwordless sudo"):
        sudo.check_no_password(inventory)
    sudo.check_no_password(Inventory((["gpu1", ("gpu2", {"_sudo": True})], {})))
