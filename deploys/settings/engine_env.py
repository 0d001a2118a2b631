"""What an operator may add to an engine's environment (``kvceph_extra_env``,
``kvceph_engine_profile.env``).

kvceph writes each engine's env file itself (deploys/render.py ``environment``): a variable it
sets there, or a value the file cannot hold, is refused here, naming the setting that carries
it, before any host is touched (not later by the template check, which can only name the
template). Pure: no pyinfra state.
"""

from __future__ import annotations

from deploys.settings import model_source
from deploys.settings.engine_list import DEVICE_VARIABLE

# What render.environment sets in every engine's env file (tests/unit/test_engine_env.py keeps
# the two in step): the LMCache config, the hash seed, the S3 profile and home, the digest, the
# versions the engine starts with (deploys/engine/upgrade.py VERSIONS_VAR).
ALWAYS = (
    "LMCACHE_CONFIG_FILE",
    "PYTHONHASHSEED",
    "AWS_PROFILE",
    "HOME",
    "HF_HOME",
    "KVCEPH_DIGEST",
    "KVCEPH_ENGINE_VERSIONS",
)
# LMCache reads LMCACHE_<FIELD> over its config file: one of the fields kvceph renders into
# lmcache.yaml (render.lmcache_config; tests/unit/test_value_kinds.py keeps the two in step)
# would change the tier behind the rendered, sized and checked file.
LMCACHE_RENDERED = (
    "chunk_size", "local_cpu", "max_local_cpu_size", "remote_url", "remote_storage_plugins",
    "save_unfull_chunk", "enable_async_loading", "lookup_timeout_ms", "remote_serde",
    "blocking_timeout_secs", "pre_caching_hash_algorithm", "extra_config",
)  # fmt: skip
# ... and with the gate (kvceph_vllm_guard): where it is imported from, who reaches /health.
GUARD = ("PYTHONPATH", "KVCEPH_OPEN_NETWORKS")


def managed(engine, guard: bool) -> dict[str, tuple[str, str]]:
    """The variables kvceph sets for this host's engines -> (why, fix) of their refusal.

    + engine: the host's EngineSettings
    + guard: kvceph_vllm_guard
    """
    names = dict.fromkeys(ALWAYS, ("is set by kvceph in every engine's environment", "remove it"))
    # The unit lets the engine write there only (ProtectSystem=strict): one setting names it.
    names["HF_HOME"] = ("is set by kvceph from kvceph_hf_home", "set kvceph_hf_home instead")
    if guard:
        why = ("is set by kvceph's engine gate", "remove it, or set kvceph_vllm_guard False")
        names.update(dict.fromkeys(GUARD, why))
        if engine.profile.mp:  # the host's first engine serves the MP server's /metrics
            names["KVCEPH_MP_METRICS_URL"] = why
    for name, _ in model_source.environment(engine.source):
        names[name] = (
            f"is set by kvceph for kvceph_model_source {engine.source.source}",
            "remove it",
        )
    if any(e.devices is not None for e in engine.engines):
        names[DEVICE_VARIABLE[engine.accelerator]] = (
            "is set by kvceph from each engine's devices (kvceph_engines)",
            "remove it; list each engine's devices in kvceph_engines",
        )
    return names


def check(r, engine, guard: bool) -> None:
    """Refuse a ``kvceph_extra_env`` / profile ``env`` entry the engine's env file cannot take.

    + r: the host's settings reader (deploys/settings.py ``_Reader``)

    Refused: a variable kvceph sets itself, ``LMCACHE_<FIELD>`` of a field kvceph renders into
    lmcache.yaml, a variable set by both settings (a value the file
    cannot carry is refused earlier, by deploys/settings/file_formats.py).
    """
    kvceph = managed(engine, guard)
    profile = dict(engine.profile.env)
    for key, env in (
        ("kvceph_engine_profile.env", engine.profile.env),
        ("kvceph_extra_env", engine.extra_env),
    ):
        for name, _value in env:
            if name in kvceph:
                raise r.fail(key, name, *kvceph[name])
            field = name.removeprefix("LMCACHE_").lower()
            if name.startswith("LMCACHE_") and field in LMCACHE_RENDERED:
                raise r.fail(
                    key,
                    name,
                    f"overrides {field} of the lmcache.yaml kvceph renders and sizes (LMCache "
                    "reads LMCACHE_<FIELD> over the file)",
                    "remove it; set the field through its kvceph_lmcache_* setting "
                    "(docs/settings.md)",
                )
            if key == "kvceph_extra_env" and name in profile:
                raise r.fail(
                    key, name, "is also set by kvceph_engine_profile.env", "set it in one of them"
                )
