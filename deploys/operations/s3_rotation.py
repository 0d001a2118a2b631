"""S3 key rotation on the RGW user: add the configured key beside the old one, retire the old.

Used only by ``rotate.py`` (``deploys/stages/rotation.py``), never by ``deploy.py``:
removing a key is the one destructive step kvceph takes, behind the operator naming the key
and a check that no running engine still holds it. Reads come from the ``RgwUser`` fact
(secrets hashed on the host); the add goes through ``s3admin.py add-key`` (no secret on any
command line).
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, operation

from deploys.facts import memo
from deploys.facts.rgw import RgwUser
from deploys.operations.s3 import _fail, _radosgw_admin, _s3admin, secret_sha256, user_refusal


@operation()
def user_key(
    uid: str,
    access_key: str,
    secret_key: str,
    admin_script: str | None = None,
    admin_config: str | None = None,
    timeout: int = 60,
):
    """
    Add the configured key pair to an existing RGW user, keeping its other keys (rotation).

    + uid: RGW user id (must exist: ``deploy.py`` creates it)
    + access_key: the new access key (a ``Secret``; only compared, never printed)
    + secret_key: the new secret key (a ``Secret``; compared by SHA-256)
    + admin_script: path of s3admin.py on the host (``add-key`` reads the keys from the file)
    + admin_config: private INI file holding the same keys
    + timeout: seconds for the remote command

    Engines keep working with the old key, which stays valid until ``user_key_retired``.
    The user holding the access key with another secret is refused: that is a replacement.
    """
    current = memo.read(host, RgwUser, uid=uid, timeout=timeout)
    problem = add_key_refusal(current, uid, access_key, secret_key)
    if problem:
        yield _fail(problem)
        return
    if any(k["access_key"] == str.__str__(access_key) for k in current["keys"]):
        host.noop(f"RGW user {uid} already holds the configured key")
        return
    yield _s3admin(admin_script, admin_config, timeout, "add-key", QuoteString(uid))


def add_key_refusal(current: dict | None, uid: str, access_key: str, secret_key: str) -> str | None:
    """Why the configured key pair cannot be added to the user (one line), or None."""
    if current is None:
        return (
            f"S3 key rotation: RGW user {uid} does not exist, so there is nothing to rotate; "
            "fix: run deploy.py (it creates the user with the configured keys)"
        )
    keys = {k["access_key"]: k["secret_sha256"] for k in current.get("keys", [])}
    wanted = str.__str__(access_key)
    if wanted in keys and keys[wanted] != secret_sha256(secret_key):
        return (
            f"S3 key rotation: RGW user {uid} holds the configured access key with a different "
            "secret key; kvceph does not replace a secret in place (engines would get 403); "
            "fix: configure a new access key (KVCEPH_S3_ACCESS_KEY) for the rotation"
        )
    return None


def retire_refusal(
    current: dict | None,
    uid: str,
    access_key: str,
    keep_access_key: str,
    keep_secret_key: str,
    engines_on_old_key: list[str] | tuple[str, ...] = (),
) -> str | None:
    """
    Why ``access_key`` cannot be removed from the user now (one line), or None.

    + engines_on_old_key: inference hosts whose running engine is not (yet) the one
      configured with the kept key, each with its reason
    """
    what = f"S3 key rotation: not retiring access key {access_key} of RGW user {uid}"
    if access_key == str.__str__(keep_access_key):
        return (
            f"{what}: it is the configured key the engines use; fix: name the OLD key in "
            "kvceph_retire_access_key"
        )
    if current is None:
        return f"{what}: the user does not exist; fix: check kvceph_s3_user"
    keys = {k["access_key"] for k in current.get("keys", [])}
    if access_key not in keys:
        return None  # already retired: nothing left to check
    problem = user_refusal(current, uid, keep_access_key, keep_secret_key)
    if problem:
        return (
            f"{what}: the user does not hold the configured key pair, so no key would be "
            "left for the engines; fix: run rotate.py with kvceph_rotation=add, then deploy.py"
        )
    if engines_on_old_key:
        return (
            f"{what}: engines not yet on the configured key: {', '.join(engines_on_old_key)}; "
            "fix: run deploy.py with the new keys until every engine has restarted, then retire"
        )
    return None


@operation()
def user_key_retired(
    uid: str,
    access_key: str,
    keep_access_key: str,
    keep_secret_key: str,
    engines_on_old_key: list[str] | tuple[str, ...] = (),
    timeout: int = 60,
):
    """
    Remove an old access key from an RGW user, once no engine can still be using it.

    + uid: RGW user id
    + access_key: the old access key to remove (an identifier, not a secret)
    + keep_access_key: the configured key (a ``Secret``): never removed, must be held
    + keep_secret_key: its secret (a ``Secret``; compared by SHA-256)
    + engines_on_old_key: inference hosts whose running engine is not the one configured
      with the kept key (read by the caller from their facts); any refuses the removal
    + timeout: seconds for ``radosgw-admin``

    ``radosgw-admin key rm`` takes only the access key: no secret on a command line.
    """
    current = memo.read(host, RgwUser, uid=uid, timeout=timeout)
    problem = retire_refusal(
        current, uid, access_key, keep_access_key, keep_secret_key, engines_on_old_key
    )
    if problem:
        yield _fail(problem)
        return
    if access_key not in {k["access_key"] for k in current.get("keys", [])}:
        host.noop(f"RGW user {uid} does not hold access key {access_key}")
        return
    yield _radosgw_admin(
        timeout,
        "key",
        "rm",
        QuoteString(f"--uid={uid}"),
        "--key-type=s3",
        QuoteString(f"--access-key={access_key}"),
    )
