"""pyinfra glue for verify.py: targets from host settings, engine restarts over SSH.

Kept out of verify.py (which pyinfra executes per host) so that tests can import it.
"""

from __future__ import annotations

import shlex

from pyinfra import logger
from pyinfra.api.command import StringCommand

from deploys import render, tier_preflight
from deploys.access import sudo
from deploys.engine import drain, engine_address
from deploys.facts.connector import RemoteTierLog
from deploys.router import routes as routing
from deploys.settings import namespace
from deploys.tier import crossover, measured
from deploys.verification import mp, routed, runner, targets, transport
from deploys.verification import report as reporting

UNIT = "vllm"  # the default engine's unit (deploys/settings/engine_list.py)


class SshControl:
    """Restart and journal reads on the engines, over pyinfra's connected hosts.

    + units: target name -> (host, unit) for engines that are not their host's only
      ``vllm.service`` (``gpu1/engine-a`` -> ``("gpu1", "vllm-engine-a.service")``)
    + drains: target name -> (engine venv python, port, ``kvceph_drain_timeout``,
      ``kvceph_vllm_bind``) for engines behind the gate: their restarts drain first, like the
      deploy's (deploys/engine/drain.py)
    """

    def __init__(
        self,
        inv,
        units: dict[str, tuple[str, str]] | None = None,
        drains: dict[str, tuple[str, int, int, str]] | None = None,
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
        # Root as the operations get it: the host's `_sudo` (and friends), or `--sudo`.
        ok, output = target.run_shell_command(
            StringCommand(command), _timeout=timeout + 15, **sudo.arguments(target.state, target)
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
        python, port, drain_timeout, bind = self.drains[name]
        _, out = self._run(
            host_name, drain.command(python, port, drain_timeout, bind), drain_timeout + 60
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

    def mp_clear_l1(self, name: str) -> str | None:
        """POST /cache/clear to the MP server of target ``name``'s host: None, or the error."""
        host_name, _ = self._unit(name)
        ok, out = self._run(host_name, mp.clear_l1_command(), 30)
        return None if ok and mp.cleared(out) else f"{host_name}: {out[-200:]}"

    def mp_metrics(self, name: str) -> str:
        """The MP server's /metrics on target ``name``'s host ("" when unreadable)."""
        host_name, _ = self._unit(name)
        ok, out = self._run(host_name, mp.metrics_command(), 30)
        return out if ok else ""

    def remote_tier(self, name: str) -> list[str] | None:
        """LMCache's remote-backend lines since the engine started (facts RemoteTierLog)."""
        host_name, unit = self._unit(name)
        fact = RemoteTierLog()
        ok, out = self._run(host_name, fact.command(unit=unit).get_raw_value(), 60)
        if not ok:
            return None
        return fact.process(out.split("; "))["lines"]


def target_name(host_name: str, engines, engine) -> str:
    """The host's name for its only engine; ``host/engine`` where it runs several."""
    return host_name if len(engines) == 1 else f"{host_name}/{engine.name}"


def target_for(h, settings, vs, engine=None) -> targets.Target:
    engines = settings.engine.engines
    engine = engine or engines[0]
    decided = settings.lmcache.tier.crossover
    # An engine bound to one address (a data-plane network) answers there only; a wildcard
    # bind answers on the address the controller reaches the host at.
    address = engine_address.remote(settings.security.vllm_bind)
    address = address or h.data.get("ssh_hostname") or h.name
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"  # IPv6 literal
    return targets.Target(
        name=target_name(h.name, engines, engine),
        base_url=f"{vs.scheme}://{address}:{engine.port}",
        model=settings.engine.model,
        tensor_parallel_size=settings.engine.tensor_parallel_size,
        chunk_size=settings.lmcache.chunk_size,
        save_unfull_chunk=settings.lmcache.save_unfull_chunk,
        health_timeout=settings.engine.health_timeout,
        max_model_len=settings.engine.max_model_len,
        serve_model=settings.engine.serve_model,
        connector=settings.lmcache.tier.connector,
        min_hit_tokens=decided.min_hit_tokens if decided else 0,
        crossover=decided.describe() if decided else "",
        skip_short_puts=settings.lmcache.tier.skip_short_puts,
        local_cpu=settings.lmcache.local_cpu,
        hash_algorithm=settings.lmcache.hash_algorithm,
        hash_seed=settings.engine.python_hash_seed,
        kv_dtype=settings.engine.kv_dtype,
        namespace=namespace.prefix(settings),
        mp=settings.engine.profile.mp,
        mp_prefix=render.mp_prefix(settings) if settings.engine.profile.mp else "",
    )


def _address(h) -> str:
    """Where the controller reaches host ``h``: its inventory address (IPv6 in brackets)."""
    address = str(h.data.get("ssh_hostname") or h.name)
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def router_routes(checked, inv, by_engine: dict[tuple[str, str], targets.Target]) -> list:
    """Every route of every router host (deploys/router/routes.py), as routed.Route: the
    router's own URL for its workers, and the target verify.py scrapes for each.

    + by_engine: (host, kvceph_engines name) -> the engine's target
    """
    addresses = {n: str(inv.get_host(n).data.get("ssh_hostname") or n) for n in checked.hosts}
    out = []
    for name, me in checked.hosts.items():
        if me.router is None:
            continue
        bind = engine_address.remote(me.router.bind)
        reach = engine_address.url_host(bind) if bind else _address(inv.get_host(name))
        for route in routing.routes(checked.hosts, addresses, me.router, name):
            out.append(
                routed.Route(
                    router=name,
                    url=f"http://{reach}:{route.port}",
                    model=route.model,
                    policy=me.router.policy,
                    workers=tuple((w.url, by_engine[(w.host, w.engine)]) for w in route.workers),
                    health_interval=me.router.health_interval,
                )
            )
    return out


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
    by_engine = {
        (name, engine.name): target_for(inv.get_host(name), me, vs, engine)
        for name, me in checked.hosts.items()
        if me.is_inference
        for engine in me.engine.engines
    }
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
            me.security.vllm_bind,
        )
        for name, me in checked.hosts.items()
        if me.is_inference and me.security.guard
        for engine in me.engine.engines
    }
    bucket = transport.Boto3Bucket(
        endpoint=vs.s3_endpoint or s3.endpoint,
        bucket=s3.bucket,
        region=s3.region,
        credentials=checked.credentials.admin(),
        timeout=vs.s3_timeout,
        max_objects=vs.max_listed_objects,
        ca_bundle=first.security.s3_ca_bundle,
    )
    cycle = runner.Runner(
        targets.Options.from_settings(vs),
        bucket,
        SshControl(inv, units, drains),
        http=transport.Http(api_key=checked.credentials.vllm_api_key),
        log=logger.info,
    )
    for g in (
        () if vs.router_only else tier_preflight.plan_lines(checked.hosts, checked.cache_groups)
    ):
        logger.info(g.replace("kvceph: crossover", "kvceph verify: crossover in use"))
    result = cycle.run(groups, router_routes(checked, inv, by_engine), vs.canary_hosts)
    for writer, figures in cycle.measured:
        logger.info(record_measurement(checked, writer, figures, result.run_id, result.started))
    print(reporting.table(result), flush=True)
    # A router-only run is no verdict on the cache chain: status.py's "last verify" stays.
    path = reporting.write_json(result, vs.report_dir, latest=not vs.router_only)
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


def record_measurement(checked, writer, figures: dict, run_id: str, started: str) -> str:
    """Store a warm step's figures as its cache group's measurement; the sentence to log.

    + checked: preflight's settings (the writer's host decides directory and group)
    + writer: the Target whose warm step loaded every chunk
    + figures: prompt_tokens, cold_ttft_s, warm_ttft_s, kv_bytes
    + run_id, started: the verify run, for the file and the crossover's source
    """
    me = checked.hosts[writer.host]
    e, tier = me.engine, me.lmcache.tier
    path = measured.path_for(tier.measured_dir, e.serve_model, e.tensor_parallel_size)
    data = {
        **figures,
        "model": e.serve_model,
        "tensor_parallel_size": e.tensor_parallel_size,
        "host": writer.name,
        "verify_run": run_id,
        "measured_at": started,
        "load_bytes_per_s": figures["kv_bytes"] / figures["warm_ttft_s"],
    }
    new = crossover.decide(
        override=tier.min_hit_tokens,
        measured=data,
        measured_path=str(path),
        prefill_points=tier.prefill_points,
        configured_load_s_per_token=0.0,  # unused: there is a measurement
        chunk_size=me.lmcache.chunk_size,
        max_model_len=e.max_model_len,
    )
    was = tier.crossover.min_hit_tokens if tier.crossover else 0
    group = f"cache group {e.model} TP={e.tensor_parallel_size}"
    if not crossover.worth_replacing(was, new.min_hit_tokens, path.exists(), me.lmcache.chunk_size):
        return (
            f"kvceph verify: {group}: these figures give a crossover of {new.min_hit_tokens} "
            f"tokens, within noise of the {was} in use: {path} kept (no roll for noise)"
        )
    measured.write(path, data)
    change = (
        "unchanged"
        if new.min_hit_tokens == was
        else f"was {was}: the next deploy.py renders it into lmcache.yaml and rolls the group"
    )
    return (
        f"kvceph verify: measured figures of {group} written to {path}; crossover from them: "
        f"{new.describe()}, {change}"
    )
