"""pyinfra glue for verify.py: targets from host settings, engine restarts over SSH.

Kept out of verify.py (which pyinfra executes per host) so that tests can import it.
"""

from __future__ import annotations

import shlex

from pyinfra import logger
from pyinfra.api.command import StringCommand

from deploys import drain
from deploys.verification import report as reporting
from deploys.verification import runner

UNIT = "vllm"  # the default engine's unit (deploys/settings/engine_list.py)


class SshControl:
    """Restart and journal reads on the engines, over pyinfra's connected hosts.

    + units: target name -> (host, unit) for engines that are not their host's only
      ``vllm.service`` (``gpu1/engine-a`` -> ``("gpu1", "vllm-engine-a.service")``)
    + drains: target name -> (engine venv python, port, ``kvceph_drain_timeout``) for engines
      behind the gate: their restarts drain first, like the deploy's (deploys/drain.py)
    """

    def __init__(
        self,
        inv,
        units: dict[str, tuple[str, str]] | None = None,
        drains: dict[str, tuple[str, int, int]] | None = None,
    ):
        self.inventory = inv
        self.units = units or {}
        self.drains = drains or {}

    def _unit(self, name: str) -> tuple[str, str]:
        return self.units.get(name, (name, UNIT))

    def _run(self, name: str, command, timeout: int) -> tuple[bool, str]:
        target = self.inventory.get_host(name)
        if not target.connected:
            target.connect(reason="verify", raise_exceptions=False)
        if not target.connected:
            return False, f"{name}: not connected"
        # The operator's sudo choice for this host applies here too (data `_sudo`).
        ok, output = target.run_shell_command(
            StringCommand(command),
            _sudo=bool(target.data.get("_sudo", False)),
            _timeout=timeout + 15,
        )
        return ok, "; ".join(line for line in output.output_lines if line.strip())

    def run(self, name: str, command: str, timeout: int) -> tuple[bool, str]:
        """Run ``command`` on host ``name``: (ok, its output lines joined by '; ')."""
        return self._run(name, command, timeout)

    def restart(self, name: str, timeout: int) -> str | None:
        host_name, unit = self._unit(name)
        if name not in self.drains:
            command = f"timeout {int(timeout)} systemctl restart {shlex.quote(unit)}"
            ok, out = self._run(host_name, command, timeout)
            return None if ok else f"systemctl restart {unit} on {host_name}: {out[-200:]}"
        python, port, drain_timeout = self.drains[name]
        _, out = self._run(
            host_name, drain.command(python, port, drain_timeout), drain_timeout + 60
        )
        result = drain.parse(out.split("; "))
        log = logger.warning if result.cut or result.state == "failed" else logger.info
        log(f"kvceph verify: drain {host_name} {unit}: {drain.summary(result, drain_timeout)}")
        ok, out = self._run(host_name, drain.restart_command(unit, port, timeout), timeout)
        return None if ok else f"systemctl restart {unit} on {host_name}: {out[-200:]}"

    def journal_has(self, name: str, since: float, text: str) -> bool | None:
        host_name, unit = self._unit(name)
        # grep -c prints 0 and exits 1 on no match; `|| true` keeps that a valid answer.
        cmd = (
            f"timeout 30 journalctl -u {shlex.quote(unit)} --since @{int(since)} --no-pager -q"
            f" | grep -c -F {shlex.quote(text)} || true"
        )
        ok, out = self._run(host_name, cmd, 30)
        last = out.rsplit("; ", 1)[-1].strip() if ok else ""
        return int(last) > 0 if last.isdigit() else None


def target_name(host_name: str, engines, engine) -> str:
    """The host's name for its only engine; ``host/engine`` where it runs several."""
    return host_name if len(engines) == 1 else f"{host_name}/{engine.name}"


def target_for(h, settings, vs, engine=None) -> runner.Target:
    engines = settings.engine.engines
    engine = engine or engines[0]
    address = h.data.get("ssh_hostname") or h.name
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"  # IPv6 literal
    return runner.Target(
        name=target_name(h.name, engines, engine),
        base_url=f"{vs.scheme}://{address}:{engine.port}",
        model=settings.engine.model,
        tensor_parallel_size=settings.engine.tensor_parallel_size,
        chunk_size=settings.lmcache.chunk_size,
        save_unfull_chunk=settings.lmcache.save_unfull_chunk,
        health_timeout=settings.engine.health_timeout,
        max_model_len=settings.engine.max_model_len,
        serve_model=settings.engine.serve_model,
    )


def run_cycle(state, host, checked, inv) -> bool:
    """The whole cycle; False (the operation fails) when a check failed.

    With ``state`` and ``host`` in its signature pyinfra runs it directly and takes its return
    value as the operation's status: a clean failure, one log line per failed check.
    """
    first = next(h for h in checked.hosts.values() if h.is_inference)
    vs, s3 = first.verify, first.s3
    # Every engine is a member of its host's cache group.
    groups = [
        [
            target_for(inv.get_host(name), checked.hosts[name], vs, engine)
            for name in g.hosts
            for engine in checked.hosts[name].engine.engines
        ]
        for g in checked.cache_groups
    ]
    units = {
        target_name(name, me.engine.engines, engine): (name, engine.unit)
        for name, me in checked.hosts.items()
        if me.is_inference
        for engine in me.engine.engines
    }
    drains = {
        target_name(name, me.engine.engines, engine): (
            f"{me.engine.venv}/bin/python",
            engine.port,
            me.engine.drain_timeout,
        )
        for name, me in checked.hosts.items()
        if me.is_inference and me.security.guard
        for engine in me.engine.engines
    }
    bucket = runner.Boto3Bucket(
        endpoint=vs.s3_endpoint or s3.endpoint,
        bucket=s3.bucket,
        region=s3.region,
        credentials=checked.credentials,
        timeout=vs.s3_timeout,
        max_objects=vs.max_listed_objects,
        ca_bundle=first.security.s3_ca_bundle,
    )
    cycle = runner.Runner(
        runner.Options.from_settings(vs),
        bucket,
        SshControl(inv, units, drains),
        http=runner.Http(api_key=checked.credentials.vllm_api_key),
        log=logger.info,
    )
    result = cycle.run(groups)
    print(reporting.table(result), flush=True)
    path = reporting.write_json(result, vs.report_dir)
    png, notice = reporting.write_png(result, vs.report_dir)
    logger.info(f"kvceph verify: report {path}" + (f", chart {png}" if png else ""))
    if notice:
        logger.warning(f"kvceph verify: {notice}")
    if result.failures:
        for line in result.failure_lines():
            logger.error(f"kvceph verify FAILED: {line}")
        return False
    logger.info(f"kvceph verify {result.run_id}: all checks passed")
    return True
