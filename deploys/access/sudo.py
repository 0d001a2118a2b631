"""Root over a non-root SSH login: the sudo arguments and the private upload directory.

pyinfra gives every operation and fact the host's ``_sudo`` (group_data, ``--sudo``); what kvceph
runs on a host outside an operation (the run lock's channel, the orchestrator read-back, the
verify and probe commands) takes the same arguments from :func:`arguments`, so an operator who
logs in as ``deploy`` with sudo gets root everywhere, and one who logs in as root gets no sudo.

Under sudo pyinfra uploads over SFTP *as the login user*, to a file in ``/tmp`` that other users
can read, then ``sudo cp``s it. A secret must never pass there: kvceph uploads into
:data:`UPLOAD_DIR`, a directory only the login user can enter (0700, inside root's
``/var/lib/kvceph``, so no other user can plant a link there), and pyinfra's own ``sudo cp``
takes it from there.
"""

from __future__ import annotations

import posixpath
import time

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.arguments import auth_argument_meta, pop_global_arguments
from pyinfra.connectors.util import make_unix_command_for_host

from deploys import paths
from deploys.settings.reader import SettingsError

# Where SFTP lands under sudo: 0700, owned by the login user (``$SUDO_USER``).
UPLOAD_DIR = f"{paths.STATE_DIR}/upload"


def arguments(state, host) -> dict:
    """The sudo/su/doas arguments pyinfra would give an operation on ``host`` (only those set).

    + state: the run's pyinfra state (``--sudo`` and deploy-wide defaults live in its config)
    + host: the pyinfra host (``_sudo`` and friends in its data)
    """
    found, _ = pop_global_arguments(state, host, {})
    return {key: found[key] for key in auth_argument_meta if found.get(key)}


def elevated(arguments: dict | None) -> bool:
    """True when these arguments make pyinfra upload as the login user and copy with sudo
    (the condition of pyinfra's ``SSHConnector.put_file``)."""
    a = arguments or {}
    return bool(a.get("_sudo") or a.get("_doas") or a.get("_dzdo") or a.get("_su_user"))


def shell_line(state, host, script: str) -> str:
    """``script`` as the command line pyinfra would run for an operation on ``host``
    (``sudo -H -n sh -c '...'`` under sudo), for a raw SSH channel."""
    command = make_unix_command_for_host(
        state, host, StringCommand(script), **arguments(state, host)
    )
    return command.get_raw_value()


def upload_temp(target: str) -> str:
    """The private file SFTP writes for ``target`` under sudo (one name per target, so a run
    that died before pyinfra removed it leaves at most one copy, overwritten by the next)."""
    return posixpath.join(UPLOAD_DIR, target.strip("/").replace("/", "%"))


def prepare_upload_dir() -> StringCommand:
    """Run as root before an upload under sudo or doas: :data:`UPLOAD_DIR`, 0700, the login
    user's (``$SUDO_USER``; doas names it ``$DOAS_USER``, without which the directory would be
    root's and SFTP, as the login user, could not write there).

    ``install -d`` fixes owner and mode of an existing directory; its parent is root's 0755.
    """
    return StringCommand(
        "sh",
        "-c",
        QuoteString(
            f"mkdir -p -m 0755 {paths.STATE_DIR} && "
            f'install -d -m 0700 -o "${{SUDO_USER:-${{DOAS_USER:-$(id -un)}}}}" {UPLOAD_DIR}'
        ),
    )


# Where a password reaches pyinfra, and the operator's fix for each (pyinfra puts every one of
# them on the host's command lines: ``env ... PYINFRA_SUDO_PASSWORD=...``).
_PASSWORD_SOURCES = {
    "_sudo_password": "remove _sudo_password from the host's data and --same-sudo-password",
    "_su_password": "remove _su_password from the host's data",
}
_FIX = "passwordless sudo for the login user (sudoers NOPASSWD), or log in as root"


def check_no_password(inventory, state=None) -> None:
    """One line when any form of a sudo/su password would reach a host: ``_sudo_password`` or
    ``_su_password`` in its data, pyinfra's ``--same-sudo-password`` (the config's
    ``SUDO_PASSWORD``) or ``--use-sudo-password``. pyinfra hands a password to the host inside
    every command line (``env ... PYINFRA_SUDO_PASSWORD=...``), which every user there can read
    in ``/proc/<pid>/cmdline`` while the command runs. ``_su_user`` is refused too: su asks the
    target's password, and pyinfra's upload under su lands where only root may write.

    + inventory: the pyinfra inventory (checked before any host is touched)
    + state: the run's pyinfra state (default: the inventory's; None outside a run)
    """
    state = state or getattr(inventory, "state", None)
    config = getattr(state, "config", None)
    if getattr(config, "USE_SUDO_PASSWORD", False):
        raise SettingsError(
            "controller: --use-sudo-password: pyinfra passes the password on the hosts' command "
            f"lines, readable by every user there; fix: drop the flag and use {_FIX}"
        )
    for h in inventory:
        found = pop_global_arguments(state, h, {})[0] if state is not None else {}
        for key, where in _PASSWORD_SOURCES.items():
            if found.get(key) or h.data.get(key):
                raise SettingsError(
                    f"{h.name}: {key}: pyinfra passes it on the host's command lines, "
                    f"readable by every user there; fix: {where}; use {_FIX}"
                )
        su_user = found.get("_su_user") or h.data.get("_su_user")
        if su_user:
            raise SettingsError(
                f"{h.name}: _su_user = {su_user!r}: su asks for the target's password (pyinfra "
                "would pass it on the command lines) and kvceph's uploads need a login user that "
                f"owns its upload directory; fix: use _sudo or _doas with {_FIX}"
            )


def check_noninteractive(inventory, timeout: float = 15.0) -> None:
    """One line for the first connected host where the login user's sudo/doas would ask for a
    password: pyinfra would prompt, then pass the answer on every command line. Run on a raw
    channel of the host's own SSH connection (as the run lock is), before the first fact.

    + inventory: the pyinfra inventory (hosts pyinfra has not connected are skipped)
    + timeout: seconds to wait for each host's answer
    """
    for h in inventory:
        if not h.connected:
            continue
        args = arguments(h.state, h)
        if not elevated(args):
            continue
        client = getattr(h.connector, "client", None)
        if client is None:
            continue  # not SSH (local, docker): pyinfra's own prompt rules
        rc, _, err = exec_raw(client, shell_line(h.state, h, "true"), timeout)
        if rc != 0:
            how = "doas -n" if args.get("_doas") else "sudo -n"
            raise SettingsError(
                f"{h.name}: {how} true failed (exit {rc}): {first_line(err)}; fix: {_FIX} "
                "(kvceph never sends a password: pyinfra would put it on the command lines)"
            )


def exec_raw(client, command: str, timeout: float) -> tuple[int, str, str]:
    """``command`` on a new channel of a paramiko client: exit status (-1: no answer in
    ``timeout`` s), stdout and stderr.

    + client: the host's paramiko ``SSHClient`` (``host.connector.client``)
    """
    chan = client.get_transport().open_session()
    try:
        chan.settimeout(timeout)
        chan.exec_command(command)
        chan.shutdown_write()
        out, err = b"", b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if chan.recv_ready():
                out += chan.recv(4096)
            elif chan.recv_stderr_ready():
                err += chan.recv_stderr(4096)
            elif chan.exit_status_ready():
                return (
                    chan.recv_exit_status(),
                    out.decode(errors="replace"),
                    err.decode(errors="replace"),
                )
            else:
                time.sleep(0.02)
        return -1, out.decode(errors="replace"), err.decode(errors="replace")
    finally:
        chan.close()


def first_line(text: str) -> str:
    """The first non-empty line of a command's output (``no output`` when none)."""
    for line in text.replace("\r", "").splitlines():
        if line.strip():
            return line.strip()
    return "no output"
