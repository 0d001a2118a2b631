"""Root over a non-root login: the write path through pyinfra's real sudo upload, and the lock."""

import os
import subprocess
from types import SimpleNamespace

import pytest
from pyinfra.api import Config, FileUploadCommand, Inventory, State, StringCommand
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.context import ctx_host

from deploys.access import lock, sudo
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
        'install -d -m 0700 -o "${SUDO_USER:-${DOAS_USER:-$(id -un)}}" /var/lib/kvceph/upload\''
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
    with pytest.raises(SettingsError, match=r"^gpu2: _sudo_password: .*fix: .*passwordless sudo"):
        sudo.check_no_password(inventory)
    sudo.check_no_password(Inventory((["gpu1", ("gpu2", {"_sudo": True})], {})))


@pytest.mark.parametrize(
    "config, data, line",
    [
        # pyinfra --same-sudo-password: the config's SUDO_PASSWORD, every host's default
        (Config(SUDO_PASSWORD="pw"), {"_sudo": True}, r"^root1: _sudo_password: .*--same-sudo"),
        (Config(USE_SUDO_PASSWORD=True), {"_sudo": True}, r"^controller: --use-sudo-password: "),
        (Config(), {"_su_user": "root", "_su_password": "pw"}, r"^root1: _su_password: "),
        (Config(), {"_su_user": "root"}, r"^root1: _su_user = 'root': .*fix: use _sudo or _doas"),
    ],
)
def test_every_form_of_a_password_and_su_are_refused(config, data, line):
    inventory = Inventory(([("root1", data)], {}))
    state = State(inventory, config)
    with pytest.raises(SettingsError, match=line) as caught:
        sudo.check_no_password(inventory, state)
    assert "pw" not in str(caught.value).replace("password", "")


class FakeChannel:
    """A paramiko channel that answers with fixed stdout, stderr and exit status."""

    def __init__(self, out=b"", err=b"", rc=1):
        self.out, self.err, self.rc, self.command = out, err, rc, None

    def settimeout(self, _):
        pass

    def exec_command(self, command):
        self.command = command

    def shutdown_write(self):
        pass

    def recv_ready(self):
        return bool(self.out)

    def recv_stderr_ready(self):
        return bool(self.err)

    def recv(self, n):
        data, self.out = self.out[:n], self.out[n:]
        return data

    def recv_stderr(self, n):
        data, self.err = self.err[:n], self.err[n:]
        return data

    def exit_status_ready(self):
        return True

    def recv_exit_status(self):
        return self.rc

    def close(self):
        pass


def _client(chan):
    transport = SimpleNamespace(open_session=lambda: chan)
    return SimpleNamespace(get_transport=lambda: transport)


def test_a_sudo_that_asks_for_a_password_is_refused_before_the_first_fact():
    state, _, sudo1 = _hosts()
    chan = FakeChannel(err=b"sudo: a password is required\n", rc=1)
    sudo1.connected = True
    sudo1.connector = SimpleNamespace(client=_client(chan))
    with pytest.raises(SettingsError, match=r"^sudo1: sudo -n true failed \(exit 1\): sudo: a "
                       r"password is required; fix: passwordless sudo"):  # fmt: skip
        sudo.check_noninteractive(state.inventory)
    assert chan.command == "sudo -H -n sh -c true"
    sudo1.connector = SimpleNamespace(client=_client(FakeChannel(rc=0)))
    sudo.check_noninteractive(state.inventory)


def test_the_lock_says_what_sudo_said_on_stderr():
    state, _, sudo1 = _hosts()
    sudo1.connector = SimpleNamespace(client=_client(FakeChannel(err=b"sudo: a password is "
                                                                   b"required\n")))  # fmt: skip
    with pytest.raises(lock.LockError, match=r"^sudo1: could not take .*: sudo: a password is "
                       r"required \(exit 1\); fix: passwordless sudo"):  # fmt: skip
        lock.acquire(sudo1, stale_after=60, break_lock=False, timeout=2)
    sudo1.connector = SimpleNamespace(client=_client(FakeChannel(err=b"mkdir: denied\n", rc=2)))
    with pytest.raises(lock.LockError, match=r": exit 2: mkdir: denied$"):
        lock.acquire(sudo1, stale_after=60, break_lock=False, timeout=2)


def test_under_doas_the_upload_dir_is_the_login_user_s(tmp_path):
    # doas sets DOAS_USER, not SUDO_USER: the directory must still be the login user's.
    script = sudo.prepare_upload_dir().get_raw_value().replace("/var/lib/kvceph", str(tmp_path))
    owner = os.environ.get("USER") or subprocess.check_output(["id", "-un"], text=True).strip()
    env = {k: v for k, v in os.environ.items() if k != "SUDO_USER"}
    probe = script.replace("install -d -m 0700 -o", "echo")
    out = subprocess.run(["bash", "-c", probe], env={**env, "DOAS_USER": "deploy"},
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.split()[0] == "deploy"
    out = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True).stdout
    assert out.split()[0] == owner
