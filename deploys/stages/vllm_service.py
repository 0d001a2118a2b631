"""Stage 5: every engine's env file and systemd unit (``kvceph_engines``: one unit each);
engines the inventory no longer lists are removed; engines restart in batches
(``kvceph_restart_batch``) where the running engine is not the desired configuration, or where
LMCache's stock S3 connector turned S3 off in this start and the endpoint answers again.

One unit per engine, not a template ``vllm@.service``: each engine's command line differs
(port, devices), and the unit file is part of the engine's digest, so a change to one engine
restarts that engine only; and the default engine keeps today's ``vllm.service`` and
``vllm.env`` byte for byte, so existing hosts need no migration.

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
from pyinfra.operations import systemd

from deploys import paths, render
from deploys.engine import engine_lock, upgrade
from deploys.facts import memo
from deploys.facts.engine import (
    Accelerators,
    EngineUnits,
    EngineVersions,
    ServiceDrift,
    accelerator_present,
)
from deploys.operations import engine as engine_ops
from deploys.operations import files, service
from deploys.operations.files import sha256_text
from deploys.probe.report import last_verdict
from deploys.settings import HostSettings, engine_list
from deploys.settings.engine_list import Engine
from deploys.stages import engine_software


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

    shared = _shared_files(me, checked)
    if e.install:
        # Before the units that run through them: a new link points at what runs now.
        files.directory(
            name="Engine venv links",
            path=engine_lock.link_path(e.venv_base, "x").rsplit("/", 1)[0],
            mode="0755",
        )
        for engine in e.engines:
            engine_ops.engine_link(
                name=f"Venv link of {engine.unit}",
                link=e.venv_link(engine.unit),
                base=e.venv_base,
                venv=e.venv,
            )
    for engine in e.engines:
        _engine_files(me, checked, engine)
    units = set(memo.read(host, EngineUnits))
    if e.profile.mp:
        _mp_server(me)
    # Engines the inventory no longer lists: stopped before any engine (re)starts, so the
    # devices and port they held are free (a host leaving today's single vllm.service too).
    # LMCache's MP server stays until the engines rolled: back in process, the MP engines
    # still waiting for their turn run through it (removed below).
    wanted = {engine.unit for engine in e.engines} | {paths.MP_UNIT_NAME}
    for unit in sorted(units - wanted):
        service.removed(
            name=f"Remove engine {unit} (no longer in kvceph_engines)",
            unit=unit,
            files=[
                f"{paths.UNIT_DIR}/{unit}",
                f"{paths.CONFIG_DIR}/{unit.removesuffix('.service')}.env",
                # Its venv link too: a link left behind would keep its venv from every prune.
                *([e.venv_link(unit)] if e.install else []),
            ],
        )
    batch = engine_list.batch_size(e.restart_batch, checked.engine_count)
    _upgrade(me, checked, shared, paths.MP_UNIT_NAME in units, batch)
    for engine in e.engines:
        _restart(me, checked, engine, shared, batch)
    if paths.MP_UNIT_NAME in units and not e.profile.mp:
        # After the roll: a failed restart stops the host before this, and the MP engines
        # left keep their server.
        service.removed(
            name=f"Remove {paths.MP_UNIT_NAME} (the engines rolled back in process)",
            unit=paths.MP_UNIT_NAME,
            files=[paths.MP_UNIT_PATH],
        )
    if e.install:
        # After the host's roll (a failed restart stops the host before this): one venv
        # besides the profile's stays for a rollback.
        engine_ops.pruned_venvs(
            name="Prune old engine venvs and wheels", when="roll", **engine_software.prune_args(me)
        )


def upgrades(me: HostSettings, checked, shared: dict[str, str]) -> list[tuple]:
    """(engine, ``upgrade.Upgrade``) for each running engine whose versions the profile
    changes; read from the same ServiceDrift fact as the restart decision."""
    e = me.engine
    desired = (e.profile.vllm_version, e.profile.lmcache_version)
    found = []
    for engine in e.engines:
        want = running_state(me, checked, engine, shared)
        current = memo.read(
            host,
            ServiceDrift,
            **service.state_kwargs(
                want["unit"], want["environment"], want["files"], want["secret_environment"]
            ),
        )
        # The venv (read before this run installs anything) only for engines kvceph did not
        # label with their versions.
        running = upgrade.running_pair(current, lambda u=engine: _running_packages(e, u))
        mode = upgrade.parse_mode((current.get("env") or {}).get(upgrade.VERSIONS_VAR, ""))
        move = upgrade.Upgrade(running, desired, mode, e.profile.mode) if running else None
        if move is not None and move.changes:
            found.append((engine, move))
    return found


def _running_packages(e, engine: Engine) -> dict[str, str]:
    """The distributions of the venv the engine runs: through its link, else the venv from
    before digests (``kvceph_venv`` itself), else ``e.venv`` (an image's)."""
    for venv in (e.venv_link(engine.unit), e.venv_base) if e.install else (e.venv,):
        fact = memo.read(host, EngineVersions, venv=venv)
        if fact.get("python"):
            return fact.get("packages", {})
    return {}


def _upgrade(me: HostSettings, checked, shared: dict[str, str], server: bool, batch: int):
    """Say, before anything restarts, whether the new versions keep the group's object keys.
    Either way the engines roll in their batches: a new key scheme hashes with its own seed
    (preflight, deploys/engine/upgrade.py ``group_seed``), so old and new names cannot collide.
    A move between in-process and MP also says what happens to LMCache's server on the host
    (``server``: its unit is there now) and that both namespaces are live during the roll."""
    moves = upgrades(me, checked, shared)
    for engine, move in moves:
        line = upgrade.plan_line(move, me.s3.bucket, me.s3.expiration_days)
        (logger.info if move.keeps_keys else logger.warning)(
            "kvceph: %s %s: %s", me.host, engine.unit, line
        )
    e = me.engine
    for line in upgrade.server_lines(
        me.host,
        paths.MP_UNIT_NAME,
        e.profile.mode,
        server,
        [move for _, move in moves],
        batch,
        render.mp_prefix(me) if e.profile.mp else "",
    ):
        logger.warning("kvceph: %s", line)


def shared_files_desired(me: HostSettings, checked) -> dict[str, str]:
    """Path -> sha256 of the desired content, for the files every engine of the host reads."""
    aws = render.aws_dir(me)
    desired = {
        # MP mode writes no lmcache.yaml (inference_config removes kvceph's old one).
        **(
            {}
            if me.engine.profile.mp
            else {paths.LMCACHE_PATH: sha256_text(render.lmcache_yaml(me))}
        ),
        f"{aws}/credentials": sha256_text(
            render.aws_credentials(me, checked.credentials.engine(me.engine.cache_group))
        ),
        f"{aws}/config": sha256_text(render.aws_config(me)),
        paths.SECRETS_PATH: sha256_text(render.secrets_env_file(checked.credentials).reveal()),
    }
    if me.security.guard:
        desired[paths.GUARD_PATH] = sha256_text(render.guard_module())
    return desired


def _shared_files(me: HostSettings, checked) -> dict[str, str]:
    """The files every engine of the host reads (the secrets file and gate are written here,
    the LMCache and AWS files by inference_config): path -> sha256 of the desired content."""
    secrets_text = render.secrets_env_file(checked.credentials)
    desired = shared_files_desired(me, checked)
    # Root only: systemd reads it (EnvironmentFile=) before the engine drops to its user.
    files.private_file(
        name=f"Engine secrets {paths.SECRETS_PATH}",
        path=paths.SECRETS_PATH,
        content=secrets_text,
    )
    if me.security.guard:
        files.helper_script(
            "Engine gate",
            paths.GUARD_PATH,
            render.guard_module(),
            mode="0644",
            directory_label="Engine gate directory",
            directory_mode="0755",
        )
    return desired


def _engine_files(me: HostSettings, checked, engine: Engine) -> None:
    """One engine's env file and unit, enabled at boot."""
    digest = render.digest(me, checked.credentials.engine(me.engine.cache_group), engine)
    env_path, unit_path = render.env_path(engine), render.unit_path(engine)
    files.atomic_file(
        name=f"Engine environment {env_path}",
        path=env_path,
        content=render.env_file(me, digest, engine),
        user="root",
        group=me.engine.service_user,
        mode="0640",
    )
    files.atomic_file(
        name=f"Unit {unit_path}",
        path=unit_path,
        content=render.unit(me, engine),
        user="root",
        group="root",
        mode="0644",
        # In the same operation as the write, so a plan shows the reload exactly when it runs.
        on_change="timeout 120 systemctl daemon-reload",
    )
    # A run interrupted between the unit write and the reload leaves systemd stale.
    service.daemon_reload_if_stale(name="systemd daemon-reload (stale)", unit=engine.unit)
    service.enabled(name=f"Enable {engine.unit}", unit=engine.unit)


def _mp_server(me: HostSettings) -> None:
    """MP mode: LMCache's server unit, enabled and running before any engine restarts (their
    ExecStartPre waits for it); a changed unit restarts a running server (L1 is dropped, S3
    keeps the objects; the engines serve degraded meanwhile and register again)."""
    unit = paths.MP_UNIT_NAME
    files.atomic_file(
        name=f"Unit {paths.MP_UNIT_PATH}",
        path=paths.MP_UNIT_PATH,
        content=render.mp_server_unit(me),
        user="root",
        group="root",
        mode="0644",
        on_change=(
            f"timeout 120 systemctl daemon-reload && timeout 300 systemctl try-restart {unit}"
        ),
    )
    service.daemon_reload_if_stale(name="systemd daemon-reload (stale)", unit=unit)
    service.enabled(name=f"Enable {unit}", unit=unit)
    systemd.service(name=f"Start {unit}", service=unit, running=True)


def running_state(me: HostSettings, checked, engine: Engine, shared: dict[str, str]) -> dict:
    """What the engine must run with (``service.rolling_restart``'s digest, unit, environment,
    secret environment and files), as this run leaves its host."""
    digest = render.digest(me, checked.credentials.engine(me.engine.cache_group), engine)
    return {
        "digest": digest,
        "unit": engine.unit,
        "environment": dict(render.environment(me, digest, engine)),
        "secret_environment": {
            name: sha256_text(value.reveal())
            for name, value in render.secret_environment(checked.credentials)
        },
        # Every file the engine reads: a host whose copy differs, or changed since the
        # start, restarts.
        "files": {
            **shared,
            render.env_path(engine): sha256_text(render.env_file(me, digest, engine)),
            render.unit_path(engine): sha256_text(render.unit(me, engine)),
        },
    }


def _restart(me: HostSettings, checked, engine: Engine, shared: dict[str, str], batch: int):
    """Restart the engine in the run's roll when what runs is not its desired configuration."""
    e = me.engine
    service.rolling_restart(
        name=f"Rolling restart of {engine.unit}",
        **running_state(me, checked, engine, shared),
        port=engine.port,
        python=f"{e.venv}/bin/python",
        health_timeout=e.health_timeout,
        # Whether the S3 tier this engine starts with is worth it, as last measured (probe.py).
        note=last_verdict(me.verify.report_dir, me.host) if me.verify else None,
        batch=batch,
        # Without the gate nothing can stop admitting requests: no drain (deploys/engine/drain.py).
        drain_timeout=e.drain_timeout if me.security.guard else None,
        bind=me.security.vllm_bind,
        # LMCache's stock S3 connector turns S3 off for good after three connection errors
        # (deploys/tier/remote_tier.py S3_DISABLED): such an engine restarts once S3 answers.
        # kvceph's connector has no such state: a failed request is a miss, the next one tries.
        s3_endpoint=me.s3.endpoint if me.lmcache.tier.connector == "lmcache" else None,
        **(
            {"venv_link": e.venv_link(engine.unit), "venv": e.venv, "venv_base": e.venv_base}
            if e.install
            else {}
        ),
    )
