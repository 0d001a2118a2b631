"""Drift: is the running engine the one the inventory describes, and if not, which setting differs.

The deploy already decides this for its restarts (``operations/service.restart_reasons`` over
the ``ServiceDrift`` fact: digest, running environment, config file hashes and times); status
asks the same question with the same arguments. What it adds is the *setting*: the desired
text of each non-secret file (``deploys/render``) against the host's copy, field by field
(``ExecStart`` flags, environment variables, lmcache.yaml keys), named by the group_data key
that sets it where kvceph knows it; and the cache-group invariants on what *runs*: engines of
one cache group whose files disagree on a cache-key setting never reuse each other's chunks.
"""

from __future__ import annotations

import shlex

import yaml

from deploys.facts.engine import SECRET_ENV_NAME
from deploys.settings import cache_key

# ExecStart flags -> the group_data key that sets them (render.exec_start).
FLAG_KEYS = {
    "--host": "kvceph_vllm_bind",
    "--port": "kvceph_engines",
    "--gpu-memory-utilization": "kvceph_gpu_memory_utilization",
    "--max-model-len": "kvceph_max_model_len",
    "--tensor-parallel-size": "kvceph_tensor_parallel_size",
    "--kv-cache-dtype": "kvceph_kv_dtype",
    "--kv-transfer-config": "kvceph_kv_role / kvceph_engine_profile vllm_version",
    "--middleware": "kvceph_vllm_guard",
    "--revision": "kvceph_model_revision",
    "--served-model-name": "kvceph_model",
}
# lmcache.yaml keys -> group_data keys (render.lmcache_config); cache-key ones from the deploy.
LMCACHE_KEYS = {
    "local_cpu": "kvceph_lmcache_local_cpu",
    "max_local_cpu_size": "kvceph_lmcache_max_local_cpu_size (or kvceph_max_model_len)",
    "save_unfull_chunk": "kvceph_lmcache_save_unfull_chunk",
    "enable_async_loading": "kvceph_lmcache_enable_async_loading",
    "remote_serde": "kvceph_lmcache_remote_serde",
    "blocking_timeout_secs": "kvceph_lmcache_blocking_timeout_secs",
    "lookup_timeout_ms": "kvceph_lmcache_lookup_timeout_ms",
    "remote_url": "kvceph_s3_bucket / kvceph_rgw_dns_name / kvceph_s3_endpoint",
    **{name: key for name, key in cache_key.IN_FILES},
}
ENV_KEYS = {
    "PYTHONHASHSEED": "kvceph_python_hash_seed",
    "AWS_PROFILE": "kvceph_s3_profile",
    "KVCEPH_OPEN_NETWORKS": "kvceph_vllm_open_networks",
    "CUDA_VISIBLE_DEVICES": "kvceph_engines devices",
    "HABANA_VISIBLE_MODULES": "kvceph_engines devices",
}
DIGEST_VAR = "KVCEPH_DIGEST"


def _named(where: str, field: str, old, new, key: str | None) -> dict:
    return {"file": where, "field": field, "running": old, "desired": new, "setting": key}


def _flags(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """(positional words, --flag -> value) of an engine command line."""
    words, flags, i = [], {}, 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                flags[name] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                flags[name] = argv[i + 1]
                i += 1
            else:
                flags[name] = ""
        else:
            words.append(word)
        i += 1
    return words, flags


def _exec_start(lines: list[str]) -> list[str] | None:
    for line in lines:
        if line.startswith("ExecStart="):
            try:
                # systemd's quoting is a superset of what render.systemd_quote writes.
                return shlex.split(line[len("ExecStart=") :].replace("%%", "%").replace("$$", "$"))
            except ValueError:
                return None
    return None


def unit_changes(path: str, running: list[str] | None, desired: str) -> list[dict]:
    """ExecStart flag by flag, then any other differing line of the unit."""
    if running is None:
        return [_named(path, "(file)", None, "present", None)]
    out = []
    want_lines = desired.splitlines()
    have_argv, want_argv = _exec_start(running), _exec_start(want_lines)
    if have_argv is not None and want_argv is not None and have_argv != want_argv:
        have_words, have = _flags(have_argv)
        want_words, want = _flags(want_argv)
        if have_words != want_words:
            key = "kvceph_model / kvceph_model_source" if len(want_words) > 2 else None
            out.append(_named(path, "ExecStart", " ".join(have_words), " ".join(want_words), key))
        for flag in sorted(set(have) | set(want)):
            if have.get(flag) != want.get(flag):
                key = FLAG_KEYS.get(flag, "kvceph_engine_profile extra_args")
                out.append(_named(path, flag, have.get(flag), want.get(flag), key))
    others = [x for x in running if not x.startswith("ExecStart=")]
    wanted = [x for x in want_lines if not x.startswith("ExecStart=")]
    if others != wanted:
        # The directives whose lines differ (a unit holds no secret: they live in files).
        keys = {x.split("=", 1)[0] for x in set(others) ^ set(wanted) if x.strip()}
        out.append(_named(path, "unit lines " + ", ".join(sorted(keys)), None, None, None))
    return out


def _env(lines) -> dict[str, str]:
    found = {}
    for line in lines:
        key, eq, value = line.partition("=")
        if eq and not line.lstrip().startswith("#"):
            try:
                found[key.strip()] = " ".join(shlex.split(value))
            except ValueError:
                found[key.strip()] = value
    return found


def env_changes(path: str, running: list[str] | None, desired: str) -> list[dict]:
    """Variables of an engine env file that differ (the digest line is the digest's reason)."""
    if running is None:
        return [_named(path, "(file)", None, "present", None)]
    have, want = _env(running), _env(desired.splitlines())
    out = []
    for name in sorted((set(have) | set(want)) - {DIGEST_VAR}):
        if have.get(name) != want.get(name):
            key = ENV_KEYS.get(name, "kvceph_extra_env / kvceph_engine_profile env")
            old, new = have.get(name), want.get(name)
            # as the deploy's drift reasons: never the value (the hash seed is a fleet secret)
            if SECRET_ENV_NAME.search(name) or name == cache_key.ENV_VARIABLE:
                old, new = old and "(set)", new and "(set, differs)"
            out.append(_named(path, name, old, new, key))
    return out


def _flat(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): value}


def lmcache_changes(path: str, running: list[str] | None, desired: str) -> list[dict]:
    """lmcache.yaml keys (extra_config flattened) that differ."""
    if running is None:
        return [_named(path, "(file)", None, "present", None)]
    try:
        have = _flat(yaml.safe_load("\n".join(running)) or {})
    except yaml.YAMLError:
        return [_named(path, "(not YAML)", None, None, None)]
    want = _flat(yaml.safe_load(desired) or {})
    out = []
    for name in sorted(set(have) | set(want)):
        if have.get(name) != want.get(name):
            top = name.split(".", 1)[0]
            key = "kvceph_lmcache_extra_config" if top == "extra_config" else LMCACHE_KEYS.get(top)
            out.append(_named(path, name, have.get(name), want.get(name), key))
    return out


def text_changes(path: str, running: list[str] | None, desired: str) -> list[dict]:
    """A file compared as a whole (the AWS config: its settings are not worth a parser)."""
    if running == desired.splitlines():
        return []
    return [_named(path, "(file)", None if running is None else "differs", "desired", None)]


def group_splits(in_use: dict[str, dict], groups) -> list[dict]:
    """Cache-key settings that differ between the running engines of one cache group.

    + in_use: host -> its CacheKeyInUse fact (hosts not read are left out)
    + groups: the inventory's cache groups (``settings.CacheGroup``)
    """
    out = []
    for g in groups:
        hosts = [h for h in g.hosts if in_use.get(h)]
        for name, key in cache_key.IN_FILES:
            values = {h: in_use[h].get(name) for h in hosts if in_use[h].get(name) is not None}
            if len(set(values.values())) > 1:
                out.append(
                    {
                        "group": f"{g.model} TP={g.tensor_parallel_size}",
                        "field": name,
                        "setting": key,
                        "values": values,
                    }
                )
    return out
