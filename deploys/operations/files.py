"""Write files atomically, and privately where they hold secrets.

Why not pyinfra's ``files.put`` / ``files.template``: they ``cp`` over the target (a reader can
see a half-written file), a new file gets its mode only after its content (a secret readable
for a moment), under sudo the content waits in a world-readable /tmp file, and ``--diff`` shows
it. These operations create a temp file *inside the target directory* with umask 077, upload
into it (under sudo through the login user's private ``sudo.UPLOAD_DIR``), set owner and mode,
and rename it over the target: readers see the old or the new content only. Content is
compared by SHA-256 (computed on both sides), so it is never shown or diffed. Files without
a reader or a secret to protect (wheels) go through pyinfra's ``files.put``.
"""

from __future__ import annotations

import hashlib
import posixpath
from io import BytesIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, OperationError, QuoteString, StringCommand, operation
from pyinfra.facts.files import Directory, File, FileContents, Sha256File

from deploys import paths, render
from deploys.access import sudo
from deploys.facts import memo


def sha256_text(content: str) -> str:
    """Hex SHA-256 of the UTF-8 text, as ``sha256sum`` prints it for the uploaded file."""
    return hashlib.sha256(content.encode()).hexdigest()


def _mode_matches(current: int | None, wanted: str) -> bool:
    return current is not None and int(str(current), 8) == int(wanted, 8)


@operation()
def atomic_file(
    path: str,
    content: str,
    user: str = "root",
    group: str = "root",
    mode: str = "0644",
    private: bool = False,
    on_change: str | None = None,
):
    """
    Replace a file atomically (temp file in the same directory + rename).

    kvceph's own rather than ``files.put``: atomic, compared by hash (never diffed), and under
    sudo never staged where another user can read it (module docstring).

    + path: absolute path of the file on the host
    + content: the desired text
    + user: owner of the file
    + group: group of the file
    + mode: octal permissions, e.g. ``"0600"``
    + private: never diff or log the content (secrets); temp file is created with umask 077
    + on_change: a fixed command run right after the content was replaced (e.g. systemd's
      daemon-reload): part of this operation, so ``--dry`` plans it exactly when it runs

    The parent directory must exist. Example:

    .. code:: python

        atomic_file(name="LMCache config", path="/etc/kvceph/lmcache.yaml",
                    content=text, group="vllm", mode="0640")
    """
    info = memo.read(host, File, path=path)
    current_hash = memo.read(host, Sha256File, path=path) if info else None
    desired_hash = sha256_text(content)
    same_content = current_hash == desired_hash

    if private and state.config.DIFF:
        logger.info("  %s: private file, content not diffed", path)

    if info and same_content:
        # Content is right: fix ownership and mode in place, without re-uploading.
        if info.get("user") != user or info.get("group") != group:
            yield StringCommand("chown", QuoteString(f"{user}:{group}"), QuoteString(path))
        if not _mode_matches(info.get("mode"), mode):
            yield StringCommand("chmod", mode, QuoteString(path))
        if (
            info.get("user") == user
            and info.get("group") == group
            and _mode_matches(info.get("mode"), mode)
        ):
            host.noop(f"{path} is up to date")
        return

    yield from _replace(path, content, user, group, mode)
    if on_change:
        yield on_change


def _replace(path: str, content: str, user: str, group: str, mode: str):
    """The commands that put ``content`` at ``path`` atomically (temp file beside it)."""
    directory, name = posixpath.split(path)
    temp = posixpath.join(directory, f".{name}.kvceph-tmp")
    # Pre-create the temp file with umask 077: an upload into an existing file keeps its mode
    # (SFTP as root, or pyinfra's `sudo cp`), so the content is never readable by others.
    yield StringCommand("sh", "-c", QuoteString(f"umask 077 && rm -f '{temp}' && : > '{temp}'"))
    yield from upload(content.encode(), temp)
    yield StringCommand("chown", QuoteString(f"{user}:{group}"), QuoteString(temp))
    yield StringCommand("chmod", mode, QuoteString(temp))
    yield StringCommand("mv", "-f", QuoteString(temp), QuoteString(path))


def upload(data: bytes, remote: str):
    """The commands that upload ``data`` into the existing root-owned file ``remote``.

    Logged in as root, SFTP writes ``remote`` itself. Under sudo, pyinfra uploads as the login
    user and ``sudo cp``s; its default stop is a file in /tmp that others can read, so here it
    is ``sudo.UPLOAD_DIR`` (0700, the login user's): no secret passes where another user can
    read it, and pyinfra removes the copy after the ``cp``.

    + data: the file's bytes
    + remote: the target, created beforehand with the mode it must keep (``cp`` keeps it)
    """
    if sudo.elevated(host.current_op_global_arguments):
        yield sudo.prepare_upload_dir()
        yield FileUploadCommand(
            BytesIO(data), remote, remote_temp_filename=sudo.upload_temp(remote)
        )
    else:
        yield FileUploadCommand(BytesIO(data), remote, remote_temp_filename=remote)


@operation()
def hosts_entries(lines: list[str], path: str = paths.HOSTS_FILE):
    """
    kvceph's lines of /etc/hosts (marked ``# kvceph``) exactly ``lines``, every other line
    kept where it is; the file replaced atomically, only when our lines differ.

    + lines: the wanted lines, e.g. ``render.hosts_lines(me)`` (one per RGW address)
    + path: the hosts file
    """
    current = memo.read(host, FileContents, path=path) or []
    ours = [x for x in current if x.rstrip().endswith(render.HOSTS_MARKER)]
    if ours == list(lines):
        host.noop(f"{path}: kvceph's {len(lines)} line(s) are up to date")
        return
    yield from _replace(path, render.hosts_file("\n".join(current), lines), "root", "root", "0644")


@operation()
def private_file(
    path: str, content: str, user: str = "root", group: str = "root", mode: str = "0600"
):
    """
    Write a secret file atomically and privately; its content is never diffed or logged.

    + path: absolute path of the file on the host
    + content: the desired text (holds secrets)
    + user: owner of the file (root by default)
    + group: group of the file (root by default)
    + mode: octal permissions, ``"0600"`` by default

    Pass ``content`` as a ``deploys.settings.secrets.Secret`` (or give the op a ``name=``): pyinfra
    prints an unnamed operation's arguments, and a Secret prints as ``***``.
    """
    yield from atomic_file._inner(path, content, user, group, mode, private=True)


@operation()
def directory(
    path: str, user: str | None = None, group: str | None = None, mode: str | None = None
):
    """
    A directory, created with its parents when missing, with this owner and mode.

    + path: absolute path of the directory on the host
    + user: owner (left as it is when None)
    + group: group (left as it is when None)
    + mode: octal permissions, e.g. ``"0755"`` (left as they are when None)

    pyinfra's ``files.directory`` for the cases kvceph uses, its fact read through the memo.
    Example:

    .. code:: python

        directory(name="AWS directory", path="/var/lib/vllm/.aws", user="vllm",
                  group="vllm", mode="0700")
    """
    info = memo.read(host, Directory, path=path)
    if info is False:
        raise OperationError(f"{path} exists and is not a directory; fix: move it away")
    changed = False
    if info is None:
        yield StringCommand("mkdir", "-p", QuoteString(path))
        info, changed = {}, True
    if mode is not None and not _mode_matches(info.get("mode"), mode):
        yield StringCommand("chmod", mode, QuoteString(path))
        changed = True
    wrong_user = user is not None and info.get("user") != user
    wrong_group = group is not None and info.get("group") != group
    if wrong_user or wrong_group:
        if user is None:
            yield StringCommand("chgrp", QuoteString(group), QuoteString(path))
        else:
            owner = f"{user}:{group}" if group is not None else user
            yield StringCommand("chown", QuoteString(owner), QuoteString(path))
        changed = True
    if not changed:
        host.noop(f"{path} is a directory with the right owner and mode")


def named_directory(label: str, path: str, mode: str, owner: str = "root") -> None:
    """One directory, ``"<label> <path>"`` in the plan, ``owner`` its user and group.

    + label: what the directory is, e.g. ``"Config directory"``
    + path: the directory on the host
    + mode: its permissions
    + owner: its user and group (root by default)
    """
    directory(name=f"{label} {path}", path=path, user=owner, group=owner, mode=mode)


def helper_script(
    label: str,
    path: str,
    content: str,
    mode: str = "0755",
    directory_label: str | None = "Directory",
    directory_mode: str = "755",
) -> None:
    """kvceph's script directory (``paths.SCRIPT_DIR``, root 0755), then one script in it.

    Two operations, the way every stage installs a helper it runs on the host (the S3 admin
    helper, the model mirror pull, the engine gate): the directory, then the file written
    atomically (root:root).

    + label: the script's name in the plan, e.g. ``"S3 admin helper"`` (the path is added)
    + path: where the script goes, under ``paths.SCRIPT_DIR``
    + content: its text (the source under deploys/remote/)
    + mode: the script's permissions (``"0644"`` for a module Python imports)
    + directory_label: the directory operation's name before the path, or None when an
      earlier stage on this host already made it
    + directory_mode: the directory's permissions
    """
    if directory_label is not None:
        named_directory(directory_label, paths.SCRIPT_DIR, directory_mode)
    atomic_file(name=f"{label} {path}", path=path, content=content, mode=mode)
