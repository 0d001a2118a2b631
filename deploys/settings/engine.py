"""Engine settings: the software profile, the served model, the service and its engines."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from deploys.engine import engine_lock, upgrade, versions
from deploys.settings import engine_list, kinds, kv_flags, model_source, security
from deploys.settings.reader import Reader

# --- Engine (software + service) ---------------------------------------------------------------

# NVIDIA: vLLM 0.25.1, the newest vLLM that LMCache 0.5.6 loads the right KV into (newer ones
# pack K|V in a layout LMCache 0.5.6 copies wrongly: versions.KV_LOAD_DEFECTS; proven on the H200
# with real weights, hw/h200/results/2026-12-04-v025/). Move on when LMCache's fix is released.
DEFAULT_PROFILES = {
    "nvidia": {
        "name": "vllm",
        "packages": ["vllm==0.25.1", "lmcache==0.5.6"],
        "executable": "vllm",
        "vllm_version": "0.25.1",
        "lmcache_version": "0.5.6",
        "extra_args": [],
        "env": {},
        "mode": "inprocess",
        "server_executable": "lmcache",
    },
    # vllm-gaudi validates vLLM 0.26 only; the operator provides the wheelhouse (Habana index).
    "gaudi": {
        "name": "vllm-gaudi",
        "packages": ["vllm==0.26.0", "vllm-gaudi==0.26.0", "lmcache==0.5.6"],
        "executable": "vllm",
        "vllm_version": "0.26.0",
        "lmcache_version": "0.5.6",
        "extra_args": [],
        "env": {},
        "mode": "inprocess",
        "server_executable": "lmcache",
    },
}

# Built-in profiles an operator selects by name (kvceph_engine_preset) instead of the
# accelerator's default; kvceph_engine_profile's keys still apply on top. Not defaults yet.
# vllm-0.34-mp: the newest vLLM through LMCache's multi-process server (``lmcache server`` per
# host, vLLM's LMCacheMPConnector, kvceph's S3 core as the server's L2: docs/design.md "MP
# mode"); becomes the NVIDIA default once the H200 proof of issue 51 has passed.
PRESETS = {
    "vllm-0.34-mp": {
        "accelerator": "nvidia",
        "name": "vllm",
        "packages": ["vllm==0.34.0", "lmcache==0.5.6"],
        "executable": "vllm",
        "vllm_version": "0.34.0",
        "lmcache_version": "0.5.6",
        "extra_args": [],
        "env": {},
        "mode": "mp",
        "server_executable": "lmcache",
    },
}

# The locks kvceph ships for its built-in profiles, relative to the repository: `make locks`
# compiles them from DEFAULT_PROFILES (locks/compile.py), and a profile whose packages are the
# built-in ones installs from it (``_lock``). Gaudi has none: vllm-gaudi is not on the public
# index, so its tree comes from the operator's wheelhouse, whose lock kvceph renders.
BUILTIN_LOCKS = {"nvidia": "locks/nvidia.txt", "vllm-0.34-mp": "locks/vllm-0.34-mp.txt"}
ROOT = Path(__file__).resolve().parents[2]

# Gaudi env: PT_HPU_GPU_MIGRATION=1 is required by LMCache on HPU (vllm_gaudi/__init__.py).
# Not taken from the seed: VLLM_SKIP_WARMUP=True (inflates the first TTFT of every bucket; a
# lab shortcut, not for production), VLLM_EXPONENTIAL_BUCKETING (deprecated; it overrides
# VLLM_BUCKETING_STRATEGY), VLLM_USE_V1 / LMCACHE_USE_EXPERIMENTAL (no effect today).
DEFAULT_GAUDI_ENV = {"PT_HPU_GPU_MIGRATION": "1"}


@dataclass(frozen=True)
class EngineProfile:
    name: str
    packages: tuple[str, ...]
    executable: str
    vllm_version: str
    lmcache_version: str
    extra_args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    # inprocess: LMCache inside vLLM (lmcache.yaml); mp: LMCache's server beside it
    mode: str = "inprocess"
    # the kvceph_engine_preset it came from ("" = the accelerator's default)
    preset: str = ""
    # MP mode: the program in the venv lmcache-server.service runs as `<it> server ...`
    # (LMCache's console script; the lab's stand-in is kvceph-lab-lmcache)
    server_executable: str = "lmcache"

    @property
    def vllm_minor(self) -> str:
        return versions.minor(self.vllm_version)

    @property
    def mp(self) -> bool:
        return self.mode == "mp"


@dataclass(frozen=True)
class EngineSettings:
    accelerator: str  # nvidia | gaudi, from the host's group
    accelerator_check: bool  # False in labs: no accelerator to detect
    accelerator_count: int | None
    profile: EngineProfile
    install: bool
    venv: str  # the profile's venv: <kvceph_venv>-<digest> when kvceph installs (engine_lock.py)
    index_url: str | None
    wheelhouse: str | None  # local directory on the controller, uploaded for --no-index
    model: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    port: int
    kv_dtype: str
    python_hash_seed: int
    kv_role: str
    kv_load_failure_policy: str
    service_user: str
    service_home: str
    health_timeout: int
    extra_env: tuple[tuple[str, str], ...]
    source: model_source.ModelSource  # where the weights come from; the serve argument
    # kvceph_engines (deploys/settings/engine_list.py); the default: one engine on every accelerator
    engines: tuple[engine_list.Engine, ...] = (engine_list.Engine("vllm", None, 8000),)
    restart_batch: int | str = 1
    restart_whole_group: bool = False
    # Seconds a restart waits for the engine to go idle (deploys/engine/drain.py) before it cuts.
    drain_timeout: int = 120
    # What sets python_hash_seed, for the plan's lines: preflight names the key scheme where
    # the group's engines run its own seed (deploys/engine/upgrade.py group_seed).
    hash_seed_source: str = "kvceph_python_hash_seed"
    # Seconds systemd waits before it starts an engine that ended (any exit: Restart=always).
    restart_delay: int = 10
    # huggingface_hub's cache (HF_HOME): hub downloads and tokenizers; writable for the engine.
    hf_home: str = "/var/lib/vllm/.cache/huggingface"
    # kvceph_cache_group: names the group's RGW user and its keys
    # (deploys/cluster/bucket_policy.py).
    cache_group: str = ""
    # kvceph_venv: the base the profiles' venvs are named from, and the engines' links.
    venv_base: str = "/opt/kvceph/venv"
    # The lock pip installs from (--require-hashes), None where nothing locks the profile.
    lock_text: str | None = None
    lock_source: str | None = None  # where the lock came from, for messages
    # kvceph_allow_mig: GPUs in MIG mode are the operator's configuration (preflight refuses
    # them otherwise: kvceph gives engines whole GPUs by index).
    allow_mig: bool = False

    @property
    def venv_label(self) -> str:
        """The venv as an operation's name shows it: the same on every host and profile."""
        return f"{self.venv_base}-<digest>" if self.venv != self.venv_base else self.venv

    def venv_link(self, unit: str) -> str:
        """The engine's ExecStart goes through this symlink; its restart switches it."""
        return engine_lock.link_path(self.venv_base, unit)

    @property
    def serve_model(self) -> str:
        """The ``vllm serve`` argument (part of every LMCache key); ``model`` is the name."""
        return self.source.serve_argument

    @property
    def kv_block_size(self) -> int:
        return versions.KV_BLOCK_SIZE[self.accelerator]


def _base_profile(r: Reader, accelerator: str) -> tuple[str, dict]:
    """(preset name or "", the profile kvceph_engine_profile's keys apply to)."""
    preset = r.opt_str("kvceph_engine_preset") or ""
    if not preset:
        return "", dict(DEFAULT_PROFILES[accelerator])
    if preset not in PRESETS:
        raise r.fail(
            "kvceph_engine_preset",
            preset,
            "no such built-in profile",
            f"use one of {sorted(PRESETS)}",
        )
    base = dict(PRESETS[preset])
    if base.pop("accelerator") != accelerator:
        raise r.fail(
            "kvceph_engine_preset",
            preset,
            f"is not a profile for {accelerator} hosts",
            "leave it unset for this host's group",
        )
    return preset, base


def _profile(r: Reader, accelerator: str) -> EngineProfile:
    preset, base = _base_profile(r, accelerator)
    raw = {**base, **r.dict("kvceph_engine_profile", {})}
    key = "kvceph_engine_profile"
    unknown = set(raw) - set(DEFAULT_PROFILES["nvidia"])
    if unknown:
        raise r.fail(key, sorted(unknown), "unknown profile keys", "remove them")
    mode = raw["mode"]
    if mode not in versions.ENGINE_MODES:
        raise r.fail(f"{key}.mode", mode, "unknown engine mode", "use inprocess or mp")
    if mode == "mp" and accelerator != "nvidia":
        raise r.fail(
            f"{key}.mode",
            mode,
            f"LMCache's MP server has no path for {accelerator} (no CUDA IPC)",
            "use mode inprocess on these hosts",
        )
    for field, known, supported, what in (
        ("vllm_version", versions.vllm_key, versions.SUPPORTED_VLLM, "vLLM"),
        ("lmcache_version", versions.lmcache_key, versions.SUPPORTED_LMCACHE, "LMCache"),
    ):
        if not known(raw[field]):
            raise r.fail(
                f"{key}.{field}",
                raw[field],
                f"unsupported {what} version",
                f"use one of {', '.join(supported)}",
            )
    if not versions.pair_supported(raw["vllm_version"], raw["lmcache_version"]):
        raise r.fail(
            key,
            (raw["vllm_version"], raw["lmcache_version"]),
            "vLLM/LMCache pair not supported",
            "use a pair from deploys/engine/versions.py SUPPORTED_PAIRS",
        )
    exe = raw["executable"]
    if not isinstance(exe, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", exe):
        raise r.fail(f"{key}.executable", exe, "must be a program name in the venv", "e.g. vllm")
    server_exe = raw.get("server_executable", "lmcache")
    if not isinstance(server_exe, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", server_exe):
        raise r.fail(
            f"{key}.server_executable", server_exe, "must be a program name in the venv",
            "e.g. lmcache",
        )  # fmt: skip
    env = raw["env"] or {}
    if not isinstance(env, Mapping) or not all(
        re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(k)) for k in env
    ):
        raise r.fail(f"{key}.env", env, "must map UPPER_CASE names to values", "fix the names")
    security.refuse_secret_env(r, f"{key}.env", env)
    if not isinstance(raw["extra_args"], (list, tuple)):
        # a string would be split into characters, one argument each
        raise r.fail(
            f"{key}.extra_args", "...", "must be a list of arguments", "one list item per argument"
        )
    if not isinstance(raw["packages"], (list, tuple)) or not all(
        isinstance(p, str) and p.strip() for p in raw["packages"]
    ):
        # a string would be split into characters, one pip argument each, mid-deploy
        raise r.fail(
            f"{key}.packages",
            raw["packages"],
            "must be a list of pip requirements",
            "one list item per package, e.g. ['vllm==0.33.0', 'lmcache==0.5.6']",
        )
    _check_packages(r, raw)
    if not isinstance(raw["name"], str) or not re.fullmatch(kinds.PATH_WORD, raw["name"]):
        raise r.fail(
            f"{key}.name",
            raw["name"],
            "is not a name kvceph can put into a label or path (letters, digits, '_', '.', "
            "'-'; a letter or digit first)",
            "use e.g. vllm",
        )
    extra_args = tuple(str(a) for a in raw["extra_args"])
    security.refuse_secret_args(r, f"{key}.extra_args", extra_args)
    if mode == "mp" and (versions.minor(raw["vllm_version"]), raw["lmcache_version"]) not in (
        versions.MP_PAIRS
    ):
        raise r.fail(
            key,
            f"vLLM {raw['vllm_version']} + LMCache {raw['lmcache_version']} in mode mp",
            "MP mode not read for this pair",
            "use a pair from deploys/engine/versions.py MP_PAIRS, or mode inprocess",
        )
    if mode != "mp":  # MP copies KV with other code (versions.KV_LOAD_DEFECTS)
        _refuse_kv_load_defect(r, accelerator, raw)
    else:
        _refuse_mp_serve_defect(r, raw, preset)
    return EngineProfile(
        name=str(raw["name"]),
        packages=tuple(str(p) for p in raw["packages"]),
        executable=exe,
        vllm_version=str(raw["vllm_version"]),
        lmcache_version=str(raw["lmcache_version"]),
        extra_args=extra_args,
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
        mode=mode,
        preset=preset,
        server_executable=server_exe,
    )


def _check_packages(r: Reader, raw: dict) -> None:
    """Every ``packages`` entry is a ``name==version`` pin (kinds.package_problem), and a vllm
    or lmcache pin is the profile's ``vllm_version`` / ``lmcache_version``: the KV-defect check
    and the engine's flags read the label, pip installs the pin."""
    key = "kvceph_engine_profile.packages"
    for spec in raw["packages"]:
        problem = kinds.package_problem(spec)
        if problem:
            raise r.fail(
                key, spec, problem, "list name==version pins only; an index goes in "
                "kvceph_engine_index_url, local wheels in kvceph_engine_wheelhouse",
            )  # fmt: skip
    pins = engine_lock.pins(raw["packages"])
    for name in ("vllm", "lmcache"):
        pinned, label = pins.get(name), str(raw[f"{name}_version"])
        if pinned is not None and pinned != label:
            raise r.fail(
                key,
                f"{name}=={pinned}",
                f"differs from the profile's {name}_version {label!r} (the checks before the "
                "deploy read the label, pip would install the pin)",
                f"set {name}_version {pinned!r}, or pin {name}=={label}",
            )


def _real_vllm(raw: dict) -> bool:
    """Whether the profile installs vLLM itself (the lab engine's profile does not)."""
    return any(
        re.split(r"[=<>!~ \[]", str(p), maxsplit=1)[0].lower() == "vllm" for p in raw["packages"]
    )


def _refuse_mp_serve_defect(r: Reader, raw: dict, preset: str) -> None:
    """A real vLLM in MP mode whose pair cannot serve (versions.MP_SERVE_DEFECTS) would lose
    every engine it restarts at its first request: refused unless
    ``kvceph_accept_mp_serve_defect`` (a patched LMCache in the operator's wheelhouse)."""
    key = (versions.minor(raw["vllm_version"]), raw["lmcache_version"])
    defect = versions.MP_SERVE_DEFECTS.get(key)
    if not defect or not _real_vllm(raw) or r.bool("kvceph_accept_mp_serve_defect", False):
        return
    raise r.fail(
        "kvceph_engine_preset" if preset else "kvceph_engine_profile",
        f"{preset + ': ' if preset else ''}vLLM {raw['vllm_version']} + LMCache "
        f"{raw['lmcache_version']} in mode mp",
        defect,
        "keep the default in-process profile (vLLM "
        f"{DEFAULT_PROFILES['nvidia']['vllm_version']}), or set kvceph_accept_mp_serve_defect"
        " = True for an LMCache patched for this vLLM",
    )


def _refuse_kv_load_defect(r: Reader, accelerator: str, raw: dict) -> None:
    """A real vLLM on NVIDIA whose pair loads wrong KV (versions.KV_LOAD_DEFECTS) serves wrong
    answers from every cache hit, silently: refused unless ``kvceph_accept_kv_load_defect``."""
    defect = versions.kv_load_defect(raw["vllm_version"], raw["lmcache_version"])
    if accelerator != "nvidia" or not defect or not _real_vllm(raw):
        return
    if r.bool("kvceph_accept_kv_load_defect", False):
        return
    raise r.fail(
        "kvceph_engine_profile",
        f"vLLM {raw['vllm_version']} + LMCache {raw['lmcache_version']}",
        f"LMCache loads wrong KV into this vLLM on NVIDIA ({defect}: answers from cache hits "
        "are garbage)",
        f"use the default profile (vLLM {DEFAULT_PROFILES['nvidia']['vllm_version']}), or set "
        "kvceph_accept_kv_load_defect = True",
    )


def _kv_dtype(r: Reader, accelerator: str) -> str:
    dtype = r.choice("kvceph_kv_dtype", "bfloat16", ("bfloat16", "fp8"))
    if dtype == "fp8" and accelerator == "gaudi":
        # vLLM's Gaudi docs (FP8 INC): FP8 KV is --kv-cache-dtype fp8_inc with --quantization
        # inc and QUANT_CONFIG pointing at a calibration of this model on this device type
        # (validated on Llama models only); "fp8" is not what that engine takes.
        raise r.fail(
            "kvceph_kv_dtype",
            dtype,
            "the Gaudi engine takes FP8 KV only as fp8_inc with Intel Neural Compressor and a "
            "QUANT_CONFIG calibration of the model, which kvceph does not set up",
            "use bfloat16 on gaudi hosts",
        )
    return dtype


@functools.lru_cache(maxsize=8)
def _wheelhouse_lock(directory: str, stamp: tuple) -> str:
    """The rendered lock of a controller wheelhouse; ``stamp`` (names, sizes, mtimes) keys
    the cache so a run hashes the wheels once, not once per host."""
    return engine_lock.render(engine_lock.from_wheels(engine_lock.hash_wheelhouse(directory)))


@functools.lru_cache(maxsize=8)
def _read_lock(path: str, stamp: tuple) -> str:
    """A lock file's text, checked (ValueError naming the line); read and parsed once per run
    (``stamp``: its size and mtime), not once per host."""
    text = Path(path).read_text()
    engine_lock.parse(text, path)
    return text


def _file_lock(path: str) -> str:
    """A controller lock file's text; OSError / ValueError as :func:`_read_lock`."""
    st = Path(path).stat()
    return _read_lock(path, (st.st_size, st.st_mtime_ns))


def builtin_lock(profile: EngineProfile, accelerator: str) -> str | None:
    """The shipped lock (repository-relative path) of a profile whose packages are the
    built-in ones of its accelerator, else None (the lock locks the packages: another
    ``extra_args`` or ``env`` keeps it)."""
    base = PRESETS[profile.preset] if profile.preset else DEFAULT_PROFILES[accelerator]
    if profile.packages != tuple(base["packages"]):
        return None
    return BUILTIN_LOCKS.get(profile.preset or accelerator)


def _lock(r: Reader, profile: EngineProfile, accelerator: str, wheelhouse: str | None):
    """(lock text, its source), or (None, None) where nothing locks the profile.

    ``kvceph_engine_lock`` when it names a file, none when it is False; else the wheelhouse's
    rendered lock; else, for the built-in profile from the index, the lock kvceph ships."""
    key = "kvceph_engine_lock"
    value = r.raw(key, None)
    if value is False:
        return None, None  # the operator's opt-out: pip resolves on each host
    if value is not None and not isinstance(value, str):
        raise r.fail(
            key, value, "must be a lock file's path or False", "name the file, or False for none"
        )
    path = r.opt_str(key)
    pins = engine_list_pins(profile)
    if path:
        try:
            text = _file_lock(path)
        except (OSError, ValueError) as exc:
            fix = "regenerate it: python -m locks.compile --packages ... --output FILE"
            raise r.fail(key, path, str(exc), fix) from None
        source, fix_key = path, key
    elif wheelhouse:
        if not Path(wheelhouse).is_dir():
            return None, None  # the engine-software stage names the missing directory
        found = sorted(Path(wheelhouse).glob("*.whl"))
        if not found:
            return None, None
        stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in found)
        try:
            text = _wheelhouse_lock(wheelhouse, stamp)
        except ValueError as exc:
            raise r.fail("kvceph_engine_wheelhouse", wheelhouse, str(exc), "rebuild it") from None
        source, fix_key = f"wheelhouse {wheelhouse}", "kvceph_engine_wheelhouse"
    elif rel := builtin_lock(profile, accelerator):
        try:
            text = _file_lock(str(ROOT / rel))
        except (OSError, ValueError) as exc:
            raise r.fail(
                key, None, f"the shipped lock {rel}: {exc}", "run `make locks`, or set it False"
            ) from None
        source, fix_key = rel, "kvceph_engine_profile"
    else:
        return None, None
    missing = engine_lock.missing_from_lock(pins, engine_lock.parse(text, source))
    if missing:
        raise r.fail(
            fix_key,
            source,
            f"does not lock the profile's {', '.join(missing)}",
            "run `make locks`"
            if fix_key == "kvceph_engine_profile"
            else "regenerate the lock from the profile's packages",
        )
    return text, source


def engine_list_pins(profile: EngineProfile) -> dict[str, str]:
    """The profile's ``name==version`` pins by normalised name (unpinned entries left out:
    the engine-software stage refuses them)."""
    return engine_lock.pins(profile.packages)


def engine_settings(r: Reader, accelerator: str) -> EngineSettings:
    if r.peek(upgrade.RETIRED_OPT_IN, None) is not None:
        value = r.raw(upgrade.RETIRED_OPT_IN)
        raise r.fail(upgrade.RETIRED_OPT_IN, value, upgrade.RETIRED_WHY, "remove it")
    model = r.str("kvceph_model", "Qwen/Qwen3-32B")
    tp = r.int("kvceph_tensor_parallel_size", 2, lo=1, hi=64)
    if tp & (tp - 1):
        raise r.fail(
            "kvceph_tensor_parallel_size", tp, "must be a power of two", "use 1, 2, 4 or 8"
        )
    count = r.opt_int("kvceph_accelerator_count", lo=1)
    if count is not None and tp > count:
        raise r.fail(
            "kvceph_tensor_parallel_size",
            tp,
            f"exceeds the host's {count} accelerators",
            "lower the tensor-parallel size or fix kvceph_accelerator_count",
        )
    extra_env = r.dict("kvceph_extra_env", DEFAULT_GAUDI_ENV if accelerator == "gaudi" else {})
    for k in extra_env:
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(k)):
            raise r.fail(
                "kvceph_extra_env", k, "is not an environment variable name", "use UPPER_CASE"
            )
    security.refuse_secret_env(r, "kvceph_extra_env", extra_env)
    if accelerator == "gaudi" and str(extra_env.get("PT_HPU_GPU_MIGRATION")) != "1":
        raise r.fail(
            "kvceph_extra_env",
            extra_env,
            "Gaudi3 needs PT_HPU_GPU_MIGRATION=1 for LMCache",
            "add 'PT_HPU_GPU_MIGRATION': '1'",
        )
    user = r.str("kvceph_service_user", "vllm", pattern=r"[a-z_][a-z0-9_-]{0,31}")
    login = r.peek("ssh_user", None)
    problem = kinds.service_user_problem(user, login)
    if problem is None and login is None:
        implicit = kinds.implicit_login_user(
            r.host, r.peek("ssh_hostname", None), r.peek("ssh_config_file", None)
        )
        if implicit is not None and user == implicit:
            problem = (
                f"is the SSH login user (ssh_user unset: pyinfra logs in as {implicit}, from "
                "~/.ssh/config or the local user): the stage sets its home and a nologin shell, "
                "locking that login out of SSH",
                "use an account of the engine's own, e.g. vllm",
            )
    if problem:
        raise r.fail("kvceph_service_user", user, *problem)
    max_len = r.int("kvceph_max_model_len", 40960, lo=256)
    port = r.port("kvceph_vllm_port", 8000)
    source = model_source.load(r, model)
    model_source.check_key_length(r, source)
    home = r.path("kvceph_service_home", f"/var/lib/{user}")
    profile = _profile(r, accelerator)
    install = r.bool("kvceph_engine_install", True)
    base = r.path("kvceph_venv", "/opt/kvceph/venv")
    wheelhouse = r.opt_str("kvceph_engine_wheelhouse")
    lock_text, lock_source = _lock(r, profile, accelerator, wheelhouse) if install else (None, None)
    # An image that carries the engine keeps its venv where it is: nothing installs there.
    venv = base
    if install:
        pins = engine_list_pins(profile)
        name = engine_lock.digest(
            pins, profile.vllm_version, profile.lmcache_version, lock_text or ""
        )
        venv = engine_lock.venv_path(base, name)
    return EngineSettings(
        accelerator=accelerator,
        accelerator_check=r.bool("kvceph_accelerator_check", True),
        allow_mig=r.bool("kvceph_allow_mig", False),
        accelerator_count=count,
        profile=profile,
        install=install,
        venv=venv,
        venv_base=base,
        lock_text=lock_text,
        lock_source=lock_source,
        index_url=r.url("kvceph_engine_index_url"),
        wheelhouse=wheelhouse,
        model=model,
        tensor_parallel_size=tp,
        gpu_memory_utilization=r.float("kvceph_gpu_memory_utilization", 0.55),
        # Qwen3-32B's native context is 40960; the seed's 131072 makes vLLM refuse to start
        # unless YaRN is configured (no --rope-scaling in 0.33) or the override env is set:
        # preflight refuses it first (deploys/settings/context_length.py).
        max_model_len=max_len,
        port=port,
        # vLLM's --kv-cache-dtype values that both supported versions accept (0.33 has no
        # float16); Qwen3-32B runs in bf16, so bfloat16 equals vLLM's "auto" there.
        kv_dtype=_kv_dtype(r, accelerator),
        python_hash_seed=r.int("kvceph_python_hash_seed", 67, lo=0, hi=4294967295),
        kv_role=r.choice("kvceph_kv_role", "kv_both", versions.KV_ROLES),
        # recompute: a missing/unreadable chunk falls back to prefill instead of failing requests.
        kv_load_failure_policy=r.choice(
            "kvceph_kv_load_failure_policy", "recompute", versions.KV_LOAD_FAILURE_POLICIES
        ),
        service_user=user,
        service_home=home,
        health_timeout=r.int("kvceph_health_timeout", 900, lo=5, hi=7200),
        drain_timeout=r.int("kvceph_drain_timeout", 120, lo=0, hi=7200),
        restart_delay=r.int("kvceph_restart_delay", 10, lo=1, hi=600),
        # huggingface_hub's own default under HOME: hosts keep the cache they already have.
        hf_home=r.path("kvceph_hf_home", f"{home}/.cache/huggingface"),
        extra_env=tuple(sorted((str(k), str(v)) for k, v in extra_env.items())),
        source=source,
        engines=engine_list.load(r, port, tp, count),
        restart_batch=engine_list.restart_batch(r),
        restart_whole_group=r.bool(engine_list.WHOLE_GROUP_OPT_IN, False),
        cache_group=r.str(
            "kvceph_cache_group", default_cache_group(model, tp, _pp(profile)), pattern=GROUP_NAME
        ),
    )


# A cache group's name goes into an RGW user id and an environment variable's name.
GROUP_NAME = r"[a-z0-9][a-z0-9-]{0,30}"


def default_cache_group(model: str, tp: int, pp: int = 1) -> str:
    """``<model's last path part>-tp<N>[-pp<M>]``, lowercase, e.g. ``qwen3-32b-tp2``: groups
    that differ in PP only are two groups (two namespaces), so they get two users."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.rstrip("/").rsplit("/", 1)[-1].lower()).strip("-")
    return f"{slug[:24].strip('-') or 'model'}-tp{tp}" + (f"-pp{pp}" if pp != 1 else "")


def _pp(profile: EngineProfile) -> int:
    """The profile's ``--pipeline-parallel-size`` (1 when unset or not a number)."""
    value = dict(kv_flags.normalise(profile.extra_args)).get("--pipeline-parallel-size", "1")
    return int(value) if str(value).isdigit() else 1
