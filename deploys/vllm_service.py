"""Stage 5: the engine's env file and systemd unit; restart one host at a time where the
running engine is not the desired configuration.

The digest covers every file the engine reads at start (unit, env, secrets, LMCache YAML, AWS
files) and is put into the env file as KVCEPH_DIGEST; the restart decision compares it with the
digest in the *running* process's environment, so an interrupted roll resumes and ``--dry``
lists exactly the hosts that will restart. Out-of-band drift (a hand edit then a hand restart
keeps the digest) is caught too: the running environment is compared with the desired one,
and the config files' hashes and modification times with the desired content and the process
start.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import DeployError, deploy
from pyinfra.operations import files as pyinfra_files

from deploys import render
from deploys.facts.engine import Accelerators, accelerator_present
from deploys.operations import files, service
from deploys.operations.files import sha256_text
from deploys.probe.report import last_verdict
from deploys.settings import HostSettings


def accelerator_error(me: HostSettings, fact: dict) -> str | None:
    """One-line error when the host lacks the accelerator its group promises."""
    wanted = me.engine.accelerator
    if accelerator_present(fact, wanted):
        return None
    seen = [name for name in fact if accelerator_present(fact, name)] or ["none"]
    return (
        f"{me.host}: group promises {wanted} accelerators but the PCI bus shows "
        f"{', '.join(seen)}; fix: move the host to the right group (gpu/gaudi), or set "
        "kvceph_accelerator_check False for a lab without accelerators"
    )


@deploy("vLLM service")
def apply(me: HostSettings, checked) -> None:
    e = me.engine
    if e.accelerator_check:
        error = accelerator_error(me, host.get_fact(Accelerators))
        if error:
            raise DeployError(error)
    else:
        logger.warning("kvceph: %s: accelerator check skipped (kvceph_accelerator_check)", me.host)

    digest = render.digest(me, checked.credentials)
    env_text = render.env_file(me, digest)
    unit_text = render.unit(me)
    aws = render.aws_dir(me)
    secrets_text = render.secrets_env_file(checked.credentials)
    # Every file the engine reads, as this run leaves it (inference_config writes the first
    # three): a host whose copy differs, or changed since the start, restarts.
    desired_files = {
        render.LMCACHE_PATH: sha256_text(render.lmcache_yaml(me)),
        f"{aws}/credentials": sha256_text(render.aws_credentials(me, checked.credentials)),
        f"{aws}/config": sha256_text(render.aws_config(me)),
        render.ENV_PATH: sha256_text(env_text),
        render.SECRETS_PATH: sha256_text(secrets_text.reveal()),
        render.UNIT_PATH: sha256_text(unit_text),
    }
    if me.security.guard:
        desired_files[render.GUARD_PATH] = sha256_text(render.guard_module())
    files.atomic_file(
        name=f"Engine environment {render.ENV_PATH}",
        path=render.ENV_PATH,
        content=env_text,
        user="root",
        group=e.service_user,
        mode="0640",
    )
    # Root only: systemd reads it (EnvironmentFile=) before the engine drops to its user.
    files.private_file(
        name=f"Engine secrets {render.SECRETS_PATH}",
        path=render.SECRETS_PATH,
        content=secrets_text,
        user="root",
        group="root",
        mode="0600",
    )
    if me.security.guard:
        pyinfra_files.directory(
            name=f"Engine gate directory {render.GUARD_DIR}",
            path=render.GUARD_DIR,
            user="root",
            group="root",
            mode="0755",
        )
        files.atomic_file(
            name=f"Engine gate {render.GUARD_PATH}",
            path=render.GUARD_PATH,
            content=render.guard_module(),
            user="root",
            group="root",
            mode="0644",
        )
    files.atomic_file(
        name=f"Unit {render.UNIT_PATH}",
        path=render.UNIT_PATH,
        content=unit_text,
        user="root",
        group="root",
        mode="0644",
        # In the same operation as the write, so a plan shows the reload exactly when it runs.
        on_change="timeout 120 systemctl daemon-reload",
    )
    # A run interrupted between the unit write and the reload leaves systemd stale.
    service.daemon_reload_if_stale(name="systemd daemon-reload (stale)", unit=render.UNIT_NAME)
    service.enabled(name=f"Enable {render.UNIT_NAME}", unit=render.UNIT_NAME)
    service.rolling_restart(
        name=f"Rolling restart of {render.UNIT_NAME}",
        digest=digest,
        port=e.port,
        python=f"{e.venv}/bin/python",
        health_timeout=e.health_timeout,
        unit=render.UNIT_NAME,
        environment=dict(render.environment(me, digest)),
        secret_environment={
            name: sha256_text(value.reveal())
            for name, value in render.secret_environment(checked.credentials)
        },
        files=desired_files,
        # Whether the S3 tier this engine starts with is worth it, as last measured (probe.py).
        note=last_verdict(me.verify.report_dir, me.host) if me.verify else None,
        _serial=True,
    )
