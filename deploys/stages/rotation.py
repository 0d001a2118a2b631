"""S3 key rotation without an outage (rotate.py): add the new key, roll, retire the old one.

    pyinfra -y <inventory> rotate.py --data kvceph_rotation=add
    pyinfra -y <inventory> deploy.py                      (engines roll onto the new key)
    pyinfra -y <inventory> rotate.py --data kvceph_rotation=retire \\
        --data kvceph_retire_access_key=<OLD ACCESS KEY>

The new keys are the configured ones (``deploys/settings/secrets.py``: KVCEPH_S3_ACCESS_KEY/SECRET
in the environment or the secrets file); the old key is named only by its access key, an
identifier; its secret is never needed. Both phases run on the single ``ceph_admin`` host;
``retire`` first reads every inference host's running engine (ServiceDrift) and removes the
old key only when each one started with the configured credentials.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import OperationError, deploy
from pyinfra.api.exceptions import PyinfraError

from deploys import paths, render
from deploys.cluster import ceph_cli
from deploys.facts import memo
from deploys.facts.engine import ServiceDrift
from deploys.facts.rgw import RgwUser
from deploys.operations import files as kvfiles
from deploys.operations import s3_rotation
from deploys.operations.files import sha256_text
from deploys.preflight import Preflight, PreflightError
from deploys.settings import HostSettings, run_control
from deploys.settings.secrets import Secret
from deploys.stages import s3_tier

PHASE_KEY = "kvceph_rotation"
RETIRE_KEY = "kvceph_retire_access_key"
PHASES = run_control.ROTATION_PHASES
_ACCESS_KEY = run_control.ACCESS_KEY


def phase(data) -> str:
    """The phase from ``--data``, or the one-line refusal; rotate.py asks before preflight, so
    a run without one contacts no host."""
    value = data.get(PHASE_KEY)
    if value not in PHASES:
        raise PreflightError(
            f"kvceph: {PHASE_KEY} = {value!r}: must be one of {', '.join(PHASES)}; "
            f"fix: pass --data {PHASE_KEY}=add (then deploy.py, then retire)"
        )
    return value


def options(data, credentials) -> tuple[str, str | None]:
    """(phase, old access key) from ``--data``, checked; a problem is one line."""
    phase_ = phase(data)
    old = data.get(RETIRE_KEY)
    if phase_ == "add":
        return phase_, None
    if not isinstance(old, str) or not _ACCESS_KEY.fullmatch(old):
        shown = "unset" if old is None else "not an access key (letters and digits)"
        raise PreflightError(
            f"kvceph: {RETIRE_KEY} is {shown}; fix: pass --data {RETIRE_KEY}=<old access key> "
            "(the access key only, never its secret)"
        )
    configured = [str.__str__(a) for _, a, _ in credentials.group_keys]
    if credentials.admin_access_key:
        configured.append(str.__str__(credentials.admin_access_key))
    if old in configured:
        raise PreflightError(
            f"kvceph: {RETIRE_KEY} names the configured access key (the one the engines are "
            "rolled onto); fix: name the OLD access key"
        )
    return phase_, old


def engine_reason(current: dict, digest: str, credentials_path: str, credentials_sha: str):
    """Why this host's running engine may still hold another key (None: it runs ours).

    + current: the ServiceDrift fact read with ``files=(credentials_path,)``
    + digest: the desired ``KVCEPH_DIGEST`` computed with the configured (new) keys; it
      covers the credentials file, so a running digest equal to it proves the process
      started after the new credentials were written
    """
    if current["active"] != "active" or not current["main_pid"]:
        return f"engine {current['active']}"
    if current["digest"] != digest:
        return "engine started before the new keys were deployed"
    if current["sha256"].get(credentials_path) != credentials_sha:
        return f"{credentials_path} does not hold the configured keys"
    if credentials_path in current["newer"]:
        return f"{credentials_path} changed after the engine started"
    return None


def engines_on_old_key(checked: Preflight, inventory, group: str | None = None) -> list[str]:
    """``"<host> (<reason>)"`` for every inference host (of cache group ``group``, or all) not
    yet running its group's configured key."""
    pending = []
    for name, me in checked.hosts.items():
        if not me.is_inference or group not in (None, me.engine.cache_group):
            continue
        creds = checked.credentials.engine(me.engine.cache_group)
        path = f"{render.aws_dir(me)}/credentials"
        wanted = sha256_text(render.aws_credentials(me, creds))
        for engine in me.engine.engines:
            label = name if len(me.engine.engines) == 1 else f"{name}/{engine.name}"
            try:
                current = inventory.get_host(name).get_fact(
                    ServiceDrift, unit=engine.unit, files=(path,)
                )
            except PyinfraError as exc:
                # An engine we cannot see may be running the old key.
                pending.append(f"{label} (cannot read its engine: {' '.join(str(exc).split())})")
                continue
            digest = render.digest(me, creds, engine)
            reason = engine_reason(current, digest, path, wanted)
            if reason:
                pending.append(f"{label} ({reason})")
    return pending


def users_and_keys(me: HostSettings, checked: Preflight):
    """(uid, access, secret, group or None) of every user kvceph rotates: each cache group's
    engine user, then the bucket's owner (the admin user)."""
    creds = checked.credentials
    out = [(u.uid, *creds.group(u.group), u.group) for u in checked.users]
    out.append((me.s3.admin_user, creds.admin_access_key, creds.admin_secret_key, None))
    return out


@deploy("S3 key rotation: add the configured key")
def add(me: HostSettings, checked: Preflight):
    """Give each RGW user (every cache group's, the admin's) its configured key pair beside
    the old one (both stay valid); a user that holds it already is left as it is."""
    creds = checked.credentials
    timeout = ceph_cli.command_timeout(me.ceph)
    todo = users_and_keys(me, checked)
    for uid, access, secret, _group in todo:
        problem = s3_rotation.add_key_refusal(
            memo.read(host, RgwUser, uid=uid, timeout=timeout), uid, access, secret
        )
        if problem:
            raise OperationError(problem)
    # The same helper and private key files as the S3 tier: each file now holds the new keys,
    # which its user is about to hold too.
    s3_tier.install_admin_tools(me, creds.admin())
    for uid, access, secret, group in todo:
        config = paths.ADMIN_CONFIG
        if group is not None:
            config = paths.GROUP_CONFIG.format(group=group)
            kvfiles.private_file(
                name=f"S3 credentials of cache group {group} {config}",
                path=config,
                content=Secret(s3_tier.group_config(me, group, access, secret)),
            )
        s3_rotation.user_key(
            name=f"RGW user {uid} holds the configured key",
            uid=uid,
            access_key=access,
            secret_key=secret,
            admin_config=config,
            timeout=timeout,
        )
    logger.info(
        "kvceph: next: run deploy.py with the same keys (engines restart one by one), then "
        "rotate.py with %s=retire and %s=<old access key> for each old key",
        PHASE_KEY,
        RETIRE_KEY,
    )


@deploy("S3 key rotation: retire the old key")
def retire(me: HostSettings, checked: Preflight, inventory, old_access_key: str):
    """Remove the old access key from whichever kvceph user holds it, once every engine of
    that user's cache group runs its configured key (the admin key: at once)."""
    timeout = ceph_cli.command_timeout(me.ceph)
    for uid, access, secret, group in users_and_keys(me, checked):
        current = memo.read(host, RgwUser, uid=uid, timeout=timeout)
        held = [k["access_key"] for k in (current or {}).get("keys", [])]
        if old_access_key not in held:
            continue
        pending = [] if group is None else engines_on_old_key(checked, inventory, group)
        problem = s3_rotation.retire_refusal(current, uid, old_access_key, access, secret, pending)
        if problem:
            raise OperationError(problem)
        s3_rotation.user_key_retired(
            name=f"RGW user {uid} no longer holds access key {old_access_key}",
            uid=uid,
            access_key=old_access_key,
            keep_access_key=access,
            keep_secret_key=secret,
            engines_on_old_key=pending,
            timeout=timeout,
        )
        return
    host.noop(f"no kvceph RGW user holds access key {old_access_key}")
