"""Pure rendering: settings -> the text of every file kvceph writes on an inference host.

No pyinfra state is touched here, so the stages, ``--dry``, the digest and the tests all see the
same bytes. Templates in ``templates/`` only substitute; every decision (which keys a version
reads, how a value is quoted) is made in this module.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import jinja2

from deploys import paths
from deploys.engine import engine_address, upgrade, versions
from deploys.settings import HostSettings, model_source, namespace
from deploys.settings.engine_list import DEVICE_VARIABLE, Engine
from deploys.settings.secrets import Secret
from deploys.tier import connector_package, kv_sizing

# Paths from docs/design.md "Files on inference hosts".
# root:root 0600: systemd reads it before dropping privileges; no other user can.
# kvceph's gate in front of every engine route (docs/security.md "Engine API key").
DIGEST_VAR = "KVCEPH_DIGEST"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(paths.TEMPLATES)),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)


def _render(name: str, **values: Any) -> str:
    return _env.get_template(name).render(**values)


def aws_dir(me: HostSettings) -> str:
    return f"{me.engine.service_home}/.aws"


# --- Engines (kvceph_engines): one unit and env file each; the rest of the files are shared ---


def _engine(me: HostSettings, engine: Engine | None) -> Engine:
    return engine or me.engine.engines[0]


def env_path(engine: Engine) -> str:
    return f"{paths.CONFIG_DIR}/{engine.env_name}"


def unit_path(engine: Engine) -> str:
    return f"{paths.UNIT_DIR}/{engine.unit}"


# --- LMCache -----------------------------------------------------------------------------------


def lmcache_config(me: HostSettings) -> dict[str, Any]:
    """The LMCache config as a dict: only keys LMCache ``lmcache_version`` reads."""
    lmc = me.lmcache
    lmc_key = versions.lmcache_key(me.engine.profile.lmcache_version)
    if lmc_key is None:
        raise ValueError(f"{me.host}: LMCache {me.engine.profile.lmcache_version} unsupported")
    # s3_region is asserted by the 0.5.6 connector; disable_tls follows the endpoint's scheme
    # (the connector opens TLS unless told not to).
    extra: dict[str, Any] = {"s3_region": me.s3.region}
    if me.s3.disable_tls:
        extra["disable_tls"] = True
    extra.update(dict(lmc.extra_config))
    unknown = set(extra) - versions.LMCACHE_S3_EXTRA_KEYS[lmc_key]
    if unknown:
        raise ValueError(f"{me.host}: extra_config keys {sorted(unknown)} not read by {lmc_key}")
    # Buffer and timeouts fit the longest request (deploys/tier/kv_sizing.py): LMCache's defaults
    # (5 GB, 3000 ms) never hit after a restart and killed the engine at 30k tokens on an H200.
    limits = kv_sizing.limits(me)
    remote: dict[str, Any] = {"remote_url": me.s3.remote_url}
    if _kvceph(me):
        # An LMCache plugin, never beside remote_url: that would make two remote tiers.
        remote = {"remote_storage_plugins": [connector_package.PLUGIN_NAME]}
        extra = kvceph_extra_config(me)
    return {
        "chunk_size": lmc.chunk_size,
        "local_cpu": lmc.local_cpu,
        "max_local_cpu_size": limits.max_local_cpu_size,
        **remote,
        "save_unfull_chunk": lmc.save_unfull_chunk,
        "enable_async_loading": lmc.enable_async_loading,
        "lookup_timeout_ms": limits.lookup_timeout_ms,
        "remote_serde": lmc.remote_serde,
        "blocking_timeout_secs": limits.blocking_timeout_secs,
        "pre_caching_hash_algorithm": lmc.hash_algorithm,
        "extra_config": dict(sorted(extra.items())),
    }


def _kvceph(me: HostSettings) -> bool:
    return (
        me.lmcache is not None
        and me.lmcache.tier is not None
        and (me.lmcache.tier.connector == "kvceph")
    )


def kvceph_extra_config(me: HostSettings) -> dict[str, Any]:
    """extra_config for kvceph's connector: the plugin's module and class, and exactly the
    ``kvceph.*`` keys it reads (it logs any other ``kvceph.*`` key as an error)."""
    tier = me.lmcache.tier
    plugin = f"remote_storage_plugin.{connector_package.PLUGIN_NAME}"
    # Resolved by preflight (crossover.resolve); 0 (never skip) where it could not be.
    min_hit = tier.crossover.min_hit_tokens if tier.crossover else (tier.min_hit_tokens or 0)
    return {
        f"{plugin}.module_path": connector_package.MODULE_PATH,
        f"{plugin}.class_name": connector_package.CLASS_NAME,
        # Virtual-hosted like the stock connector: <bucket>.<rgw_dns_name>:<port> as Host.
        "kvceph.endpoint": me.s3.remote_url.removeprefix("s3://"),
        "kvceph.region": me.s3.region,
        "kvceph.tls": not me.s3.disable_tls,
        "kvceph.connections": tier.connections,
        "kvceph.timeout_s": tier.timeout_s,
        "kvceph.min_hit_tokens": min_hit,
        # One namespace per KV byte layout (deploys/settings/namespace.py).
        "kvceph.namespace": namespace.prefix(me),
        # Only when set, so engines configured before the key existed keep their file.
        **({"kvceph.receive_dir": tier.receive_dir} if tier.receive_dir else {}),
        **({"kvceph.refresh_s": tier.refresh_s} if tier.refresh_s is not None else {}),
        # On is the plugin's default (issue 50): only off is written, so files stay as they were.
        **({"kvceph.verify_crc32c": False} if not tier.verify_crc32c else {}),
        **({"kvceph.skip_short_puts": True} if tier.skip_short_puts else {}),
        "save_chunk_meta": False,
    }


def _yaml_scalar(value: Any) -> str:
    # JSON scalars are YAML scalars; strings come out double-quoted, so no YAML surprises
    # (yes/no/on/off, colons) can change their meaning. A list of strings is a JSON (= YAML
    # flow) list.
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return json.dumps(value)
    if not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"LMCache value {value!r} is not a scalar")
    return json.dumps(value)


def lmcache_yaml(me: HostSettings) -> str:
    """/etc/kvceph/lmcache.yaml."""
    config = lmcache_config(me)
    extra = config.pop("extra_config")
    return _render(
        "lmcache.yaml.j2",
        lmcache_version=me.engine.profile.lmcache_version,
        top=[(k, _yaml_scalar(v)) for k, v in config.items()],
        extra=[(k, _yaml_scalar(v)) for k, v in extra.items()],
    )


# --- LMCache MP server (profile mode "mp"): one per host, every engine of the host its client ---

# The server's addresses: paths.MP_* (the verifier reads them there, without jinja2).
MP_METRICS_VAR = "KVCEPH_MP_METRICS_URL"  # read by the gate (deploys/remote/engine_guard.py)
# Down longer than two of vLLM's heartbeats (10 s each) on every stop, so the engines notice a
# restart and register their KV caches again (LMCache #4642: a shorter one goes unnoticed).
# With the unit's RestartSec=5 a crashed server is away >= 30 s too (ExecStopPost runs then).
MP_STOP_PAUSE_S = 25
MP_RESTART_SEC = 5
# vLLM's heartbeat (LMCache 0.5.6 ExtraConfigDefault.heartbeat_interval; kvceph sets none).
MP_HEARTBEAT_S = 10
# A dead engine's KV pool stays mapped by the server until it is reaped: LMCache's 120 s and
# 3600 s (one that died before its first heartbeat) keep the restarted engine's GPU memory
# taken (LMCache #4014, #4631); the lowest values the server accepts with margin.
MP_REAP_TIMEOUT_S = 60
MP_REGISTRATION_GRACE_S = 300
# Seconds the vLLM unit's ExecStartPre waits for the server's /healthcheck and for its dead
# workers to be dropped: the reaper scans every reap/4 s, so a worker that never pinged is gone
# by grace + reap/4; a whole reap timeout on top for the server's own start.
MP_HEALTH_WAIT_S = MP_REGISTRATION_GRACE_S + MP_REAP_TIMEOUT_S


def _mp_refusal(me: HostSettings) -> None:
    if not me.engine.profile.mp:
        raise ValueError(f"{me.host}: the LMCache MP server is rendered for mode mp only")
    if not _kvceph(me):
        raise ValueError(
            f"{me.host}: kvceph_lmcache_connector = "
            f"{me.lmcache.tier.connector if me.lmcache and me.lmcache.tier else None!r} in MP "
            "mode: only kvceph's S3 core is rendered as the server's L2 so far; fix: set "
            "kvceph_lmcache_connector = kvceph"
        )


def mp_engine_flags(me: HostSettings) -> list[str]:
    """The vLLM flags MP mode needs beside --kv-transfer-config (none in-process)."""
    if not me.engine.profile.mp:
        return []
    flag = versions.MP_NO_EXTENSIBLE_KV.get(me.engine.profile.vllm_minor)
    return [flag] if flag else []


def mp_l1_size_gb(me: HostSettings) -> float:
    """The server's L1 (GiB, pinned): the DRAM tier kvceph sizes today (deploys/tier/kv_sizing.py,
    per worker) for every worker of every engine on the host, since one server holds them all."""
    e = me.engine
    per_worker = kv_sizing.limits(me).max_local_cpu_size
    return round(per_worker * e.tensor_parallel_size * len(e.engines), 3)


def mp_prefix(me: HostSettings) -> str:
    """kvceph's namespace of the host in MP mode (deploys/settings/namespace.py, mode field
    ``mp-lmcache<minor>``): every input the in-process namespace carries, under the group's
    grant; the core puts it before LMCache's key as the in-process connector does."""
    return namespace.of(me).prefix


def mp_object_bytes(me: HostSettings) -> int:
    """One MP object's bytes (a chunk of one worker's KV), 0 where unknown: only with the
    per-worker KV size known and no pipeline split (each PP stage holds its own layers)."""
    per_token = me.lmcache.kv_bytes_per_token
    if not per_token or namespace.pipeline_parallel_size(me) != 1:
        return 0
    return me.lmcache.chunk_size * per_token


def mp_l2_adapter(me: HostSettings) -> dict[str, Any]:
    """The server's --l2-adapter: kvceph's S3 core as a native plugin. No credentials: the
    JSON is argv and LMCache logs it; the core reads them from AWS_PROFILE + HOME."""
    _mp_refusal(me)
    tier = me.lmcache.tier
    params: dict[str, Any] = {
        # Virtual-hosted like the in-process connector: <bucket>.<rgw_dns_name>:<port> as Host.
        "endpoint": me.s3.remote_url.removeprefix("s3://"),
        "region": me.s3.region,
        "tls": not me.s3.disable_tls,
        "connections": tier.connections,
        "timeout_s": tier.timeout_s,
        "verify_crc32c": tier.verify_crc32c,
        "namespace": mp_prefix(me),
        **({"object_bytes": mp_object_bytes(me)} if mp_object_bytes(me) else {}),
        **({"receive_dir": tier.receive_dir} if tier.receive_dir else {}),
        **({"refresh_s": tier.refresh_s} if tier.refresh_s is not None else {}),
    }
    return {
        "type": "native_plugin",
        "shared": True,
        "module_path": connector_package.MP_MODULE_PATH,
        "class_name": connector_package.MP_CLASS_NAME,
        "adapter_params": params,
    }


def mp_server_exec_start(me: HostSettings) -> list[str]:
    """``lmcache server``'s argv (docs/design.md "MP mode")."""
    _mp_refusal(me)
    e = me.engine
    workers = e.tensor_parallel_size * len(e.engines)
    return [
        f"{e.venv}/bin/{e.profile.server_executable}",
        "server",
        "--host",
        paths.MP_HOST,
        "--port",
        str(paths.MP_PORT),
        "--http-host",
        paths.MP_HOST,
        "--http-port",
        str(paths.MP_HTTP_PORT),
        "--chunk-size",
        str(me.lmcache.chunk_size),
        # blake3 hashes in the server, seeded by a constant: no PYTHONHASHSEED to agree on.
        "--hash-algorithm",
        "blake3",
        "--l1-size-gb",
        f"{mp_l1_size_gb(me):g}",
        "--eviction-policy",
        "LRU",
        # One GPU worker per engine worker, so no engine's copies wait for another's.
        "--max-gpu-workers",
        str(workers),
        "--worker-reap-timeout-seconds",
        str(MP_REAP_TIMEOUT_S),
        "--worker-registration-grace-seconds",
        str(MP_REGISTRATION_GRACE_S),
        "--l2-adapter",
        json.dumps(mp_l2_adapter(me), separators=(",", ":"), sort_keys=True),
    ]


def mp_server_environment(me: HostSettings) -> list[tuple[str, str]]:
    """The server's environment: no usage reports, the S3 credentials' profile, and the GPUs
    of every engine (it runs the copy kernels on their memory)."""
    e = me.engine
    env = [
        ("LMCACHE_TRACK_USAGE", "false"),
        ("DO_NOT_TRACK", "1"),
        ("AWS_PROFILE", me.s3.profile),
        ("HOME", e.service_home),
    ]
    devices = [one.devices for one in e.engines]
    if all(d is not None for d in devices):
        union = sorted({d for one in devices for d in one})
        env.append((DEVICE_VARIABLE[e.accelerator], ",".join(str(d) for d in union)))
    return env


def mp_server_unit(me: HostSettings) -> str:
    """/etc/systemd/system/lmcache-server.service."""
    e = me.engine
    return _render(
        "lmcache-server.service.j2",
        description=f"LMCache {e.profile.lmcache_version} MP server (kvceph, {e.model})",
        user=e.service_user,
        group=e.service_user,
        home=e.service_home,
        environment=[systemd_quote(f"{k}={v}") for k, v in mp_server_environment(me)],
        exec_start=" ".join(systemd_quote(a) for a in mp_server_exec_start(me)),
        stop_pause=MP_STOP_PAUSE_S,
        restart_sec=MP_RESTART_SEC,
        writable=writable_paths(me),
    )


def mp_others_workers(me: HostSettings) -> int:
    """The GPU workers the host's other engines may hold on the server while one engine is
    down: any registration beyond them is a dead one of its own (TP x (engines - 1))."""
    e = me.engine
    return e.tensor_parallel_size * (len(e.engines) - 1)


def mp_wait_line(me: HostSettings, engine: Engine | None = None) -> str:
    """The vLLM unit's ExecStartPre (kvceph_connector.healthcheck, from the venv its ExecStart
    runs): wait for the server's /healthcheck and until it holds no dead worker of this engine
    (a crashed engine's KV pool stays mapped until reaped: LMCache #4014, #4631)."""
    e = me.engine
    venv = e.venv_link(_engine(me, engine).unit) if e.install else e.venv
    argv = [
        f"{venv}/bin/python",
        "-m",
        connector_package.MP_HEALTHCHECK_MODULE,
        paths.MP_HEALTH_URL,
        str(MP_HEALTH_WAIT_S),
        str(mp_others_workers(me)),
    ]
    return " ".join(systemd_quote(a) for a in argv)


# --- vLLM command line -------------------------------------------------------------------------


def kv_transfer_config(me: HostSettings) -> dict[str, Any]:
    """--kv-transfer-config fields, only those the profile's vLLM version accepts."""
    vkey = versions.vllm_key(me.engine.profile.vllm_version)
    if vkey is None:
        raise ValueError(f"{me.host}: vLLM {me.engine.profile.vllm_version} unsupported")
    # Never kv_parallel_size: a P2P-era field 0.33 rejects and LMCache never read.
    config: dict[str, Any] = {
        "kv_connector": versions.KV_CONNECTOR,
        "kv_role": me.engine.kv_role,
        "kv_load_failure_policy": me.engine.kv_load_failure_policy,
    }
    if me.engine.profile.mp:
        # Never kv_connector_module_path: on vLLM 0.34 it turns the extensible (VMM) KV cache
        # on, which LMCache 0.5.6 cannot share over CUDA IPC (vLLM's factory.py).
        config["kv_connector"] = versions.MP_CONNECTOR
        config["kv_connector_extra_config"] = {
            "lmcache.mp.host": f"tcp://{paths.MP_HOST}",
            "lmcache.mp.port": paths.MP_PORT,
        }
    extra = set(config) - versions.KV_TRANSFER_FIELDS[vkey]
    if extra:
        raise ValueError(f"{me.host}: vLLM {vkey} does not accept {sorted(extra)}")
    return config


def kv_transfer_json(me: HostSettings) -> str:
    return json.dumps(kv_transfer_config(me), separators=(",", ":"))


def exec_start(me: HostSettings, engine: Engine | None = None) -> list[str]:
    """The engine's argv (docs/design.md "Engine command line")."""
    e = me.engine
    # Through the engine's venv link where kvceph installs: only its restart switches the code.
    venv = e.venv_link(_engine(me, engine).unit) if e.install else e.venv
    return [
        f"{venv}/bin/{e.profile.executable}",
        "serve",
        e.serve_model,
        *model_source.serve_flags(e.source),
        "--host",
        me.security.vllm_bind,
        "--port",
        str(_engine(me, engine).port),
        "--gpu-memory-utilization",
        repr(e.gpu_memory_utilization),
        "--max-model-len",
        str(e.max_model_len),
        "--tensor-parallel-size",
        str(e.tensor_parallel_size),
        # The KV dtype is part of every LMCache object key: pass it, never leave it to "auto".
        "--kv-cache-dtype",
        e.kv_dtype,
        "--kv-transfer-config",
        kv_transfer_json(me),
        *mp_engine_flags(me),
        # vLLM's own key check leaves /invocations, /tokenize, /metrics, ... open: the gate
        # closes them (it passes everything while no API key is set).
        *(["--middleware", f"{paths.GUARD_MODULE}.Guard"] if me.security.guard else []),
        *e.profile.extra_args,
    ]


# vLLM's short spellings of flags kvceph renders (vllm/engine/arg_utils.py add_argument aliases).
FLAG_ALIASES = {"-tp": "--tensor-parallel-size"}
# Flags vLLM appends to (action="append"): one more adds, it does not replace kvceph's.
APPENDING_FLAGS = frozenset({"--middleware"})


def flag_name(arg: str) -> str:
    """The flag an argv word sets, as vLLM's FlexibleArgumentParser reads it: ``=value`` and a
    ``.field`` (JSON argument) dropped, ``_`` read as ``-``, aliases resolved; "" for a value."""
    if arg in FLAG_ALIASES:
        return FLAG_ALIASES[arg]
    if not arg.startswith("--"):
        return ""
    return arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")


def managed_flags(me: HostSettings) -> frozenset[str]:
    """The flags kvceph renders on this host's command line itself (the profile's
    ``extra_args`` left out): an extra argument that sets one again would win (argparse keeps
    the last) behind kvceph's back."""
    own = exec_start(me)[: len(exec_start(me)) - len(me.engine.profile.extra_args)]
    return frozenset(name for name in map(flag_name, own) if name) - APPENDING_FLAGS


_SYSTEMD_SAFE = re.compile(r"[A-Za-z0-9_./:=,+@-]+")


def systemd_quote(arg: str) -> str:
    """Quote one ExecStart word so systemd passes it through unchanged.

    systemd unquotes with C escapes inside quotes, expands ``%`` specifiers and ``$VAR``
    everywhere; so quote, backslash-escape ``\\`` and ``'``, and double ``%`` and ``$``.
    """
    if "\n" in arg or "\0" in arg:
        raise ValueError(f"ExecStart argument {arg!r} contains a newline or NUL")
    if arg and _SYSTEMD_SAFE.fullmatch(arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace("'", "\\'").replace("%", "%%").replace("$", "$$")
    return f"'{escaped}'"


def exec_start_line(me: HostSettings, engine: Engine | None = None) -> str:
    return " ".join(systemd_quote(a) for a in exec_start(me, engine))


# --- Environment file, unit, AWS files ---------------------------------------------------------


def _env_quote(value: str) -> str:
    if "\n" in value or "\0" in value:
        raise ValueError(f"environment value {value!r} contains a newline or NUL")
    # EnvironmentFile= double quotes: backslash escapes \ " ` $ like a shell would.
    return '"' + re.sub(r'([\\"`$])', r"\\\1", value) + '"'


def environment(
    me: HostSettings, digest: str | None = None, engine: Engine | None = None
) -> list[tuple[str, str]]:
    """The engine's environment; ``KVCEPH_DIGEST`` last, only when ``digest`` is given."""
    e = me.engine
    devices = _engine(me, engine).devices
    env: dict[str, str] = {
        # MP mode: the server has its configuration on its command line; nothing reads the file.
        **({} if e.profile.mp else {"LMCACHE_CONFIG_FILE": paths.LMCACHE_PATH}),
        "PYTHONHASHSEED": str(e.python_hash_seed),
        "AWS_PROFILE": me.s3.profile,
        # awscrt finds ~/.aws/credentials through HOME: explicit, so it never depends on how
        # the unit's user is set up.
        "HOME": e.service_home,
        # huggingface_hub's cache (hub weights, tokenizers): explicit, and writable in the unit.
        "HF_HOME": e.hf_home,
        # What the process starts with, read back from it before an upgrade
        # (deploys/engine/upgrade.py).
        upgrade.VERSIONS_VAR: upgrade.versions_value(
            e.profile.vllm_version, e.profile.lmcache_version, e.profile.mode
        ),
    }
    if devices is not None:
        # The runtime numbers the listed devices 0..n-1 for the engine: TP uses the first n.
        env[DEVICE_VARIABLE[e.accelerator]] = ",".join(str(d) for d in devices)
    if me.security.guard:
        env["PYTHONPATH"] = paths.SCRIPT_DIR
        # Loopback always: the deploy's own health and readiness checks run on the host; so
        # does the address the engine listens on alone, the source of their requests then.
        own = engine_address.own_network(me.security.vllm_bind)
        networks = dict.fromkeys(
            ("127.0.0.0/8", "::1/128", *([own] if own else []), *me.security.open_networks)
        )
        env["KVCEPH_OPEN_NETWORKS"] = ",".join(networks)
        if e.profile.mp and _engine(me, engine).name == e.engines[0].name:
            # One engine per host serves the server's /metrics to Prometheus (the gate's
            # /kvceph/mp-server/metrics): the server's own port is loopback, unauthenticated.
            env[MP_METRICS_VAR] = paths.MP_METRICS_URL
    for key, value in (*model_source.environment(e.source), *e.profile.env, *e.extra_env):
        if key in env or key == DIGEST_VAR:
            raise ValueError(f"{me.host}: environment {key} is managed by kvceph; remove it")
        env[key] = value
    items = list(env.items())
    if digest is not None:
        items.append((DIGEST_VAR, digest))
    return items


def env_file(me: HostSettings, digest: str | None = None, engine: Engine | None = None) -> str:
    """/etc/kvceph/vllm.env (without the digest line when ``digest`` is None)."""
    env = environment(me, digest, engine)
    return _render("vllm.env.j2", env=[(k, _env_quote(v)) for k, v in env])


# Variable names the engine reads each secret from (vLLM: VLLM_API_KEY, huggingface_hub: HF_TOKEN);
# never --api-key: argv is world-readable under /proc.
SECRET_VARIABLES = (("vllm_api_key", "VLLM_API_KEY"), ("hf_token", "HF_TOKEN"))


def secret_environment(credentials) -> list[tuple[str, Secret]]:
    """The secrets the engine gets through secrets.env: (variable, value), set ones only."""
    found = []
    for attr, name in SECRET_VARIABLES:
        value = getattr(credentials, attr, None)
        if value:
            # Secret(a Secret) would copy its masked str(): reveal first.
            found.append((name, Secret(str.__str__(value))))
    return found


def secrets_env_file(credentials) -> Secret:
    """/etc/kvceph/secrets.env (a Secret: it prints as ***); comments only when none is set."""
    env = [(k, _env_quote(v.reveal())) for k, v in secret_environment(credentials)]
    return Secret(_render("secrets.env.j2", env=env))


def unit(me: HostSettings, engine: Engine | None = None) -> str:
    """/etc/systemd/system/vllm.service (``vllm-<name>.service`` for a named engine)."""
    e, one = me.engine, _engine(me, engine)
    label = e.model if one.unit == paths.UNIT_NAME else f"{one.name}, {e.model}"
    return _render(
        "vllm.service.j2",
        description=f"vLLM {e.profile.vllm_version} + LMCache (kvceph, {label})",
        user=e.service_user,
        group=e.service_user,
        env_file=env_path(one),
        secrets_file=paths.SECRETS_PATH,
        home=e.service_home,
        exec_start=exec_start_line(me, one),
        # Loading a 32B model and warming up takes minutes; match the readiness budget.
        timeout_start=timeout_start(me),
        restart_delay=e.restart_delay,
        start_limit_burst=START_LIMIT_BURST,
        start_limit_interval=start_limit_interval(timeout_start(me), e.restart_delay),
        writable=writable_paths(me),
        mp_server=paths.MP_UNIT_NAME if e.profile.mp else None,
        exec_start_pre=mp_wait_line(me, one) if e.profile.mp else None,
    )


def timeout_start(me: HostSettings) -> int:
    """TimeoutStartSec: the readiness budget, in MP mode at least the ExecStartPre's whole wait
    for the server (a kill mid-wait would count as a failed start)."""
    e = me.engine
    return max(e.health_timeout, MP_HEALTH_WAIT_S + 30) if e.profile.mp else e.health_timeout


# Starts in a row that end in a crash before the unit stays failed (start-limit-hit).
START_LIMIT_BURST = 5


def start_limit_interval(timeout_start: int, restart_delay: int) -> int:
    """StartLimitIntervalSec: long enough to hold ``START_LIMIT_BURST`` starts that each use
    the whole start budget, so an engine that dies at the end of every load is still counted
    (systemd's default 10 s would never count a start that takes minutes)."""
    return START_LIMIT_BURST * (timeout_start + restart_delay)


def writable_paths(me: HostSettings) -> list[str]:
    """The paths the engine writes under ProtectSystem=strict: its home (vLLM's, torch's and
    Triton's caches, Habana's logs) and huggingface_hub's cache when that lies elsewhere."""
    e = me.engine
    home = e.service_home.rstrip("/")
    inside = e.hf_home == home or e.hf_home.startswith(home + "/")
    return [e.service_home] if inside else [e.service_home, e.hf_home]


def _ini_value(value: str, what: str) -> str:
    if value != value.strip() or any(c in value for c in "\r\n"):
        raise ValueError(f"{what} contains whitespace or a newline")
    return value


def aws_credentials(me: HostSettings, credentials) -> str:
    """~/.aws/credentials for the service user. Contains the secret: write it 0600 only."""
    return _render(
        "aws_credentials.j2",
        profile=me.s3.profile,
        access_key=_ini_value(credentials.access_key.reveal(), "access key"),
        secret_key=_ini_value(credentials.secret_key.reveal(), "secret key"),
    )


def aws_config(me: HostSettings) -> str:
    """~/.aws/config for the service user (boto3 / AWS CLI tooling; LMCache ignores it)."""
    return _render(
        "aws_config.j2",
        profile=me.s3.profile,
        region=me.s3.region,
        endpoint_url=me.s3.endpoint,
    )


# Marks the lines kvceph owns in /etc/hosts: the deploy replaces exactly those.
HOSTS_MARKER = "# kvceph"


def hosts_lines(me: HostSettings) -> list[str]:
    """The /etc/hosts lines for virtual-hosted addressing, one per address of the bucket's
    name (kvceph_s3_endpoint_ips); none with wildcard DNS."""
    if me.s3.wildcard_dns:
        return []
    return [
        f"{ip} {me.s3.bucket_host} {me.s3.endpoint_host}  {HOSTS_MARKER}"
        for ip in me.s3.endpoint_ips
    ]


def hosts_file(current: str, lines: list[str]) -> str:
    """``current`` /etc/hosts text with kvceph's lines replaced by ``lines``: every other
    line kept in its place, ours where the first of ours was (else appended)."""
    out: list[str] = []
    placed = False
    for line in current.splitlines():
        if line.rstrip().endswith(HOSTS_MARKER):
            if not placed:
                out += lines
                placed = True
            continue
        out.append(line)
    if not placed:
        out += lines
    return "".join(f"{line}\n" for line in out)


def guard_module() -> str:
    """/usr/local/lib/kvceph/kvceph_engine_guard.py: the gate's source, as shipped."""
    return paths.GUARD_SOURCE.read_text()


def digest(me: HostSettings, credentials, engine: Engine | None = None) -> str:
    """sha256 over everything the running engine reads at start.

    It goes into the env file as KVCEPH_DIGEST, so the running process's environment proves
    which configuration it started with.
    """
    h = hashlib.sha256()
    for part in (
        unit(me, engine),
        env_file(me, None, engine),
        "" if me.engine.profile.mp else lmcache_yaml(me),  # MP: flags only, no lmcache.yaml
        aws_credentials(me, credentials),
        aws_config(me),
        secrets_env_file(credentials).reveal(),
        guard_module() if me.security.guard else "",
        me.security.s3_ca_pem or "",
        # The profile's venv (the link in ExecStart stays): a new profile restarts the engine.
        me.engine.venv,
        # kvceph's connector is code the engine loads at start: a new build restarts it. Only
        # with that connector, so the digests of stock-connector engines stay as they were.
        *([connector_package.current().content] if _kvceph(me) else []),
    ):
        data = part.encode()
        # Length-prefixed, so moving text between files changes the digest.
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()
