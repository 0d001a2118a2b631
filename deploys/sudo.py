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
    """Run as root before an upload under sudo: :data:`UPLOAD_DIR`, 0700, the login user's.

    ``install -d`` fixes owner and mode of an existing directory; its parent is root's 0755.
    """
    return StringCommand(
        "sh",
        "-c",
        QuoteString(
            f"mkdir -p -m 0755 {paths.STATE_DIR} && "
            f'install -d -m 0700 -o "${{SUDO_USER:-$(id -un)}}" {UPLOAD_DIR}'
        ),
    )


def check_no_password(inventory) -> None:
    """One line when a host's data holds ``_sudo_password``: pyinfra hands it to the host inside
    every command line (``env ... PYINFRA_SUDO_PASSWORD=...``), which every user there can read
    in ``/proc/<pid>/cmdline`` while the command runs.

    + inventory: the pyinfra inventory (checked before any host is touched)
    """
    for h in inventory:
        if h.data.get("_sudo_password"):
            raise SettingsError(
                f"{h.name}: _sudo_password: pyinfra passes it on the host's command lines, "
                "readable by every user there; fix: passwordless sudo for the login user "
                "(sudoers NOPASSWD), or log in as root"
            )
