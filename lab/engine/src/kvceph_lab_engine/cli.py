"""`kvceph-lab-engine serve MODEL ...` -- the `vllm serve` look-alike; `--version`.

MODEL is a hub id or a model directory (config.json and the lab tokenizer's files, read at
start: model_dir.py). Reads from the environment (as vLLM + LMCache do): HF_HUB_OFFLINE,
LMCACHE_CONFIG_FILE, LMCACHE_<KEY> overrides, PYTHONHASHSEED (chunk-hash chain seed),
AWS_PROFILE / HOME / AWS_* (awscrt default credentials chain), VLLM_API_KEY (the API key, as
vLLM reads it; or --api-key) and KVCEPH_DIGEST (shown as kvceph_lab_engine_info on /metrics).
Exit status 1 with the reason on stderr where the real pair refuses to start; 2 for flags
`vllm serve` does not know; 0 after a shutdown, also one because the engine core died (core.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from kvceph_lab_engine import BANNER, __version__, core
from kvceph_lab_engine.versions import (
    DEFAULT_VLLM_VERSION,
    KV_TRANSFER_FIELDS,
    MP_CONNECTOR,
    NO_EXTENSIBLE_KV_FLAG,
    NO_EXTENSIBLE_KV_FROM,
    emulated,
)

log = logging.getLogger("kvceph_lab_engine")
VLLM_WATCHDOG_SECONDS = 5.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvceph-lab-engine",
        description=f"{BANNER}: an OpenAI-compatible stand-in for `vllm serve` + LMCache.",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"kvceph-lab-engine {__version__} ({BANNER}; emulates vLLM "
        f"{'/'.join(sorted(KV_TRANSFER_FIELDS))} + LMCache 0.5.6)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve MODEL like `vllm serve`")
    s.add_argument("model")
    s.add_argument("--host", default="0.0.0.0")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--max-model-len", type=int, default=32768)
    s.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    s.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    s.add_argument("--kv-transfer-config", default=None)
    s.add_argument("--served-model-name", default=None)
    # hub commit pins; a local directory ignores them (as vLLM does)
    s.add_argument("--revision", default=None)
    s.add_argument("--tokenizer-revision", default=None)
    s.add_argument("--dtype", default="auto")
    s.add_argument("--kv-cache-dtype", default="auto")
    # vLLM: --api-key KEY (repeatable in newer releases), else $VLLM_API_KEY.
    s.add_argument("--api-key", action="append", default=None)
    # vLLM: ASGI middleware classes by import path, wrapped around the app (asgi.py).
    s.add_argument("--middleware", action="append", default=[])
    # accepted and ignored, like harmless vLLM tuning flags
    # vLLM's cap on requests in one batch; the rest wait (vllm:num_requests_waiting).
    s.add_argument("--max-num-seqs", type=int, default=None)
    for flag in ("--block-size", "--max-num-batched-tokens", "--seed"):
        s.add_argument(flag, type=int, default=None)
    for flag in ("--hf-overrides", "--load-format", "--download-dir", "--uvicorn-log-level"):
        s.add_argument(flag, default=None)
    for flag in (
        "--enforce-eager",
        "--no-enable-extensible-kv-cache",
        "--trust-remote-code",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--disable-log-requests",
        "--disable-log-stats",
    ):
        s.add_argument(flag, action="store_true")
    # lab-only knobs
    s.add_argument(
        "--vllm-version", default=DEFAULT_VLLM_VERSION, type=_vllm_version,
        help="the vLLM release to emulate and report: 0.26.x, 0.33.x or 0.34.x",
    )  # fmt: skip
    s.add_argument("--bytes-per-token", type=int, default=64, help="KV bytes per token per worker")
    s.add_argument("--prefill-ms-per-token", type=float, default=0.2)
    s.add_argument(
        "--load-bytes-per-s",
        type=float,
        default=None,
        help="simulated S3 load bandwidth of the host (all workers); loads take at least "
        "bytes / this (default: as fast as RGW answers)",
    )
    s.add_argument("--kv-dtype", default=None, help="KV dtype in object keys (default bfloat16)")
    return p


def _vllm_version(value: str) -> str:
    try:
        emulated(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _kv_dtype(args) -> str:
    if args.kv_dtype:
        return args.kv_dtype
    if args.kv_cache_dtype and args.kv_cache_dtype != "auto":
        return args.kv_cache_dtype
    if args.dtype and args.dtype != "auto":
        return args.dtype
    return "bfloat16"


def _refuse(msg: str) -> int:
    print(f"ERROR: {msg}", file=sys.stderr)
    print(f"({BANNER}: refused to start as vLLM + LMCache would)", file=sys.stderr)
    return 1


def _mp_store(args, kv: dict, world: int):
    """vLLM's LMCacheMPConnector (LMCache's own class) and its keys: (MPClient, MPHasher)."""
    from kvceph_lab_engine.mp_client import EXTERNAL_LINE, MPClient
    from kvceph_lab_engine.mp_keys import MPHasher

    # vLLM's lmcache_mp_connector.py, when LMCache's class imports (kvceph's verify needs it).
    logging.getLogger("vllm.distributed.kv_transfer.kv_connector.v1.lmcache_mp_connector").info(
        EXTERNAL_LINE
    )
    store = MPClient(kv.get("kv_connector_extra_config") or {}, world, args.bytes_per_token)
    if store.chunk_size is None:
        log.warning("LMCache MP server not reachable at start: chunk size 256 until it is")
    hasher = MPHasher(model=args.model, world_size=world, chunk_size=store.chunk_size or 256)
    return store, hasher


def build(args):
    """Validate everything the real pair validates at startup; return (App, info). Raises
    SystemExit-worthy errors as (kind, message) via StartupError."""
    from kvceph_lab_engine import asgi, lmcache_config, model_dir
    from kvceph_lab_engine.auth import ApiKeys
    from kvceph_lab_engine.engine import KVEngine, LoadLimits, LocalCpuTier
    from kvceph_lab_engine.hashing import ChunkHasher
    from kvceph_lab_engine.metrics import Metrics
    from kvceph_lab_engine.s3 import S3Store, settings_from_extra
    from kvceph_lab_engine.server import App
    from kvceph_lab_engine.versions import check_kv_transfer

    if args.no_enable_extensible_kv_cache and emulated(args.vllm_version) != NO_EXTENSIBLE_KV_FROM:
        raise UnknownFlag(NO_EXTENSIBLE_KV_FLAG)
    if not 0 < args.gpu_memory_utilization <= 1:
        raise StartupError(
            f"ValueError: GPU memory utilization must be within (0, 1]. "
            f"Got {args.gpu_memory_utilization}."
        )
    if args.tensor_parallel_size < 1 or args.pipeline_parallel_size < 1:
        raise StartupError("ValueError: parallel sizes must be >= 1")
    try:
        model_dir.load(args.model)
    except model_dir.ModelError as exc:
        raise StartupError(str(exc)) from exc
    kv = None
    if args.kv_transfer_config is not None:
        try:
            kv = check_kv_transfer(args.kv_transfer_config, args.vllm_version)
        except ValueError as exc:
            raise StartupError(f"{type(exc).__name__.replace('KVTransferError', 'ValueError')}: "
                               f"{exc}") from exc  # fmt: skip
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    from kvceph_lab_engine import devices

    try:
        # The first `world` visible devices, as vLLM's workers take them.
        seen = devices.visible()
        devices.check_world(world, seen)
        devices.claim(seen[:world], args.gpu_memory_utilization)
    except devices.DeviceError as exc:
        raise StartupError(str(exc)) from exc
    metrics_info = {
        "version": __version__,
        "vllm_version": args.vllm_version,
        "digest": os.environ.get("KVCEPH_DIGEST", ""),
    }
    store = None
    local_cpu = None
    hasher = None
    limits = LoadLimits(load_bytes_per_s=args.load_bytes_per_s)
    mp = kv is not None and kv.get("kv_connector") == MP_CONNECTOR
    if mp:
        store, hasher = _mp_store(args, kv, world)
    elif kv is not None:
        try:
            view = lmcache_config.load()
        except lmcache_config.ConfigError as exc:
            raise StartupError(str(exc)) from exc
        try:
            hasher = ChunkHasher(
                model=args.model,
                world_size=world,
                kv_dtype=_kv_dtype(args),
                chunk_size=view.chunk_size,
                save_unfull_chunk=view.save_unfull_chunk,
                algorithm=view.pre_caching_hash_algorithm,
                seed=os.environ.get("PYTHONHASHSEED"),
            )
        except ValueError as exc:
            raise StartupError(f"ValueError: {exc}") from exc
        log.info(
            "LMCache: chunk_size=%d remote_url=%s remote_storage_plugins=%s "
            "save_unfull_chunk=%s hash=%s (effective %s) local_cpu=%s",
            view.chunk_size,
            view.remote_url,
            view.remote_storage_plugins,
            view.save_unfull_chunk,
            view.pre_caching_hash_algorithm,
            hasher.algorithm,
            view.local_cpu,
        )
        # LMCache pins max_local_cpu_size GiB per worker even with local_cpu false: every load
        # goes through it. lookup_timeout_ms bounds asynchronous loads, blocking_timeout_secs
        # synchronous ones.
        limits = LoadLimits(
            cpu_buffer_bytes=int(view.max_local_cpu_size * (1 << 30)),
            async_loading=view.enable_async_loading,
            lookup_timeout_ms=view.lookup_timeout_ms,
            blocking_timeout_secs=view.blocking_timeout_secs,
            load_bytes_per_s=args.load_bytes_per_s,
        )
        log.info(
            "LMCache: max_local_cpu_size=%g GiB per worker, enable_async_loading=%s, "
            "lookup_timeout_ms=%d, blocking_timeout_secs=%d",
            view.max_local_cpu_size,
            view.enable_async_loading,
            view.lookup_timeout_ms,
            view.blocking_timeout_secs,
        )
        if view.local_cpu:
            local_cpu = LocalCpuTier(int(view.max_local_cpu_size * (1 << 30)))
        if view.remote_storage_plugins:
            # LMCache 0.5.6 makes one RemoteBackend per plugin; the lab knows kvceph's only.
            from kvceph_lab_engine import kvceph_store

            unknown = [p for p in view.remote_storage_plugins if p != kvceph_store.PLUGIN]
            if unknown:
                raise StartupError(
                    f"remote_storage_plugins {unknown}: the lab engine emulates only "
                    f"{kvceph_store.PLUGIN!r}"
                )
            if view.remote_url:
                log.warning(
                    "remote_url and remote_storage_plugins are both set: LMCache makes two "
                    "remote tiers; the lab engine uses the plugin's only"
                )
            store = kvceph_store.create(view.extra_config, view.chunk_size)
        elif view.remote_url:
            if not view.remote_url.startswith("s3://"):
                raise StartupError(
                    f"remote_url {view.remote_url!r}: the lab engine emulates only s3:// remotes"
                )
            try:
                s3settings = settings_from_extra(view.remote_url, view.extra_config)
            except AssertionError as exc:
                raise StartupError(f"AssertionError: {exc}") from exc
            except ValueError as exc:
                raise StartupError(f"ValueError: {exc}") from exc
            store = S3Store(s3settings)
    engine = KVEngine(
        hasher=hasher
        or ChunkHasher(
            model=args.model,
            world_size=world,
            kv_dtype=_kv_dtype(args),
            chunk_size=256,
            save_unfull_chunk=False,
            algorithm="sha256_cbor",
            seed="0",
        ),
        tp=world,
        bytes_per_token=args.bytes_per_token,
        prefill_ms_per_token=args.prefill_ms_per_token,
        store=store,
        local_cpu=local_cpu,
        load_failure_policy=(kv or {}).get("kv_load_failure_policy", "fail"),
        kv_role=(kv or {}).get("kv_role", "kv_consumer" if kv is None else "kv_both"),
        local_cache_tokens=0
        if args.no_enable_prefix_caching
        else max(args.max_model_len * 4, 1 << 16),
        limits=limits,
    )
    if kv is None:
        engine.kv_role = "none"
        engine.store = None
        engine.local_cpu = None
    # LMCache's counters, where vLLM's /metrics would show them (metrics.LMCACHE_COUNTERS).
    lmcache_labels = None
    if kv is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        lmcache_labels = {
            "model_name": args.model,
            "served_model_name": args.served_model_name or "",
        }
    metrics = Metrics(
        args.served_model_name or args.model, metrics_info, lmcache=lmcache_labels, workers=world
    )
    app = App(
        model=args.served_model_name or args.model,
        max_model_len=args.max_model_len,
        engine=engine,
        metrics=metrics,
        vllm_version=args.vllm_version,
        max_num_seqs=args.max_num_seqs,
        api_keys=ApiKeys(args.api_key or [os.environ.get("VLLM_API_KEY", "")]),
        middleware=asgi.load(args.middleware),
    )
    return app


class StartupError(RuntimeError):
    pass


class UnknownFlag(RuntimeError):
    """A flag the emulated vLLM release does not have (argparse's exit 2)."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )
    log.warning("%s %s (emulating vLLM %s + LMCache 0.5.6)", BANNER, __version__, args.vllm_version)
    try:
        app = build(args)
    except StartupError as exc:
        return _refuse(str(exc))
    except UnknownFlag as exc:
        _parser().error(f"unrecognized arguments: {exc}")
    from kvceph_lab_engine.server import make_server

    try:
        server = make_server(args.host, args.port, app)
    except OSError as exc:
        return _refuse(f"OSError: cannot listen on {args.host}:{args.port}: {exc}")

    def _stop(signum, frame):
        log.info("signal %d: shutting down", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    def _dead():
        # vLLM's API server shuts down once its engine core died: at once after a failed plain
        # request, within its 5 s watchdog after a stream.
        log.info("Shutting down FastAPI HTTP server.")
        threading.Timer(VLLM_WATCHDOG_SECONDS, server.shutdown).start()

    app.on_dead = _dead

    def _core_died():
        log.error("%s", core.DIED)
        app.engine.dead = app.engine.dead or core.DIED
        app._dead_reported = True
        log.info("Shutting down FastAPI HTTP server.")
        threading.Thread(target=server.shutdown, daemon=True).start()

    engine_core = core.Core(_core_died)
    log.info("%s pid=%d started", core.NAME, engine_core.pid)
    log.info("Starting vLLM API server 0 on http://%s:%d (%s)", args.host, args.port, BANNER)
    log.info("Application startup complete.")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        engine_core.stop()
        if getattr(app.engine.store, "mp", False):
            app.engine.store.close()  # LMCache's adapter unregisters its KV cache
        server.server_close()
    if app.engine.dead:
        log.info("Application shutdown complete.")
    # Exit status 0 also after the engine died, as vLLM's (vllm-project/vllm#48966): systemd
    # restarts it only with Restart=always.
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
