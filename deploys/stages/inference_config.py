"""Stage 4: LMCache config, the service user's AWS profile, /etc/hosts for virtual-hosted S3,
the private CA in the system trust store and a TLS check to the bucket's name.

Every file's text comes from ``deploys.render`` (pure); this stage only places it, atomically,
with the owners and modes of docs/design.md "Files on inference hosts".
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import files as pyinfra_files

from deploys import paths, render
from deploys.facts import memo
from deploys.facts.engine import CacheKeyInUse, KvcephWroteFile, cache_key_from_argv
from deploys.operations import files, tls
from deploys.settings import HostSettings, cache_key, namespace
from deploys.settings.secrets import Secret
from deploys.tier import kv_sizing

# Seconds for the TLS check's connection and handshake.
TLS_TIMEOUT = 10

_warned_dropped: set[tuple[str, ...]] = set()


def dropped_keys_warning(me: HostSettings) -> str | None:
    keys = me.lmcache.dropped_keys
    if not keys or keys in _warned_dropped:
        return None
    _warned_dropped.add(keys)
    return (
        f"kvceph_lmcache_extra_config keys {', '.join(keys)} are ignored by LMCache "
        f"{me.engine.profile.lmcache_version}; they are left out of lmcache.yaml "
        "(remove them from group_data)"
    )


def desired_cache_key(me: HostSettings) -> dict[str, str]:
    """The cache-key settings this run writes, in CacheKeyInUse's shape (all str)."""
    config = render.lmcache_config(me)
    return {
        "chunk_size": str(config["chunk_size"]),
        "pre_caching_hash_algorithm": str(config["pre_caching_hash_algorithm"]),
        "PYTHONHASHSEED": dict(render.environment(me))["PYTHONHASHSEED"],
        **cache_key_from_argv(render.exec_start(me)),
        "kvceph.namespace": namespace.prefix(me),
    }


def cache_key_changes(current: dict | None, me: HostSettings) -> list[str]:
    """
    One warning per cache-key setting that differs from what the host's engine runs with.

    ``current`` is the CacheKeyInUse fact ({} on a blank host: no warning). A setting the
    current files do not show (e.g. kv dtype never passed) is not compared.
    """
    if not current:
        return []
    wanted = desired_cache_key(me)
    # The cache that becomes unreachable is the one the running engine wrote.
    model = current.get("model", me.engine.model)
    group = f"{model} TP={current.get('tensor_parallel_size', me.engine.tensor_parallel_size)}"
    warnings = []
    for name, key in cache_key.IN_FILES:
        old, new = current.get(name), wanted.get(name)
        if name in cache_key.LMCACHE_EXTRA_KEYS and old is None:
            old = ""  # written before namespaces, or by the stock connector: the bucket root
        if old is None or new is None or old == new:
            continue
        if name in cache_key.LMCACHE_EXTRA_KEYS:
            # In MP mode the server's prefix (render.mp_prefix) names the objects, not
            # lmcache.yaml: the vLLM stage's plan says when those names change.
            if not me.engine.profile.mp:
                warnings.append(namespace_change(me, group, old, new))
            continue
        if name == cache_key.ENV_VARIABLE:  # the fleet's hash seed is a secret
            old, new = "(set)", "(set, differs)"
            key = me.engine.hash_seed_source  # a new key scheme's own seed: the profile
        warnings.append(
            f"kvceph: {me.host}: cache key setting {key} changes {old} -> {new}: the KV cache "
            f"already in bucket {me.s3.bucket} becomes unreachable for cache group {group} "
            f"(its objects age out via the lifecycle rule, {me.s3.expiration_days} days)"
        )
    return warnings


def namespace_change(me: HostSettings, group: str, old: str, new: str) -> str:
    """The plan's line for a new namespace (deploys/settings/namespace.py): a cold start."""
    return (
        f"kvceph: {me.host}: the object namespace changes {old or 'the bucket root'} -> "
        f"{new or 'the bucket root'}: cache "
        f"group {group} starts cold (every prompt a miss until written once); the old "
        f"namespace's objects in bucket {me.s3.bucket} stay unread (status.py lists them) until "
        f"the lifecycle rule removes them ({me.s3.expiration_days} days)"
    )


@deploy("Inference config")
def apply(me: HostSettings, checked) -> None:
    e = me.engine
    user = e.service_user
    warning = dropped_keys_warning(me)
    if warning:
        logger.warning("kvceph: %s", warning)
    # The pinned-RAM rule and the settings that kill an engine were refused by preflight.
    for warning in kv_sizing.warnings(me):
        logger.warning("kvceph: %s", warning)
    in_use = memo.read(
        host, CacheKeyInUse, lmcache=paths.LMCACHE_PATH, env=paths.ENV_PATH, unit=paths.UNIT_PATH
    )
    for warning in cache_key_changes(in_use, me):
        logger.warning(warning)

    files.named_directory("Config directory", paths.CONFIG_DIR, "0755")
    # The unit may write only where render.writable_paths says; a path it names must exist
    # (systemd refuses to start the unit otherwise). The home exists with the user.
    for path in render.writable_paths(me)[1:]:
        files.named_directory("HF cache directory", path, "0750", owner=user)
    if e.profile.mp:
        # The server takes flags only and the engines no LMCACHE_CONFIG_FILE: a lmcache.yaml
        # left from in-process would be read by nothing and mislead; one of the operator's
        # own (no kvceph marker) stays.
        if memo.read(host, KvcephWroteFile, path=paths.LMCACHE_PATH):
            pyinfra_files.file(
                name=f"Remove the in-process LMCache config {paths.LMCACHE_PATH} (MP mode)",
                path=paths.LMCACHE_PATH,
                present=False,
            )
    else:
        files.atomic_file(
            name=f"LMCache config {paths.LMCACHE_PATH}",
            path=paths.LMCACHE_PATH,
            content=render.lmcache_yaml(me),
            user="root",
            group=user,
            mode="0640",
        )

    # The directory is 0700 before any file lands in it; the files are written privately.
    aws = render.aws_dir(me)
    files.named_directory("AWS directory", aws, "0700", owner=user)
    files.private_file(
        name=f"AWS credentials {aws}/credentials",
        path=f"{aws}/credentials",
        content=Secret(
            render.aws_credentials(me, checked.credentials.engine(me.engine.cache_group))
        ),
        user=user,
        group=user,
        mode="0600",
    )
    files.private_file(
        name=f"AWS config {aws}/config",
        path=f"{aws}/config",
        content=render.aws_config(me),
        user=user,
        group=user,
        mode="0600",
    )

    lines = render.hosts_lines(me)
    if lines:
        # Our lines only (trailing marker), one per RGW address: awscrt spreads its
        # connections over every address the name resolves to (deploys/s3_names.py).
        files.hosts_entries(
            name=f"/etc/hosts entries for {me.s3.bucket_host} ({len(lines)})", lines=lines
        )

    # LMCache's awscrt trusts the system store, read once at engine start (the CA is in the
    # digest, so a new CA restarts the engines).
    if me.security.s3_ca_pem:
        tls.ca_trusted(name="S3 CA in the system trust store", pem=me.security.s3_ca_pem)
    if me.s3.scheme == "https":
        # Before any engine restarts: a certificate LMCache would refuse is one line here, not
        # a silent fall back to recompute after LMCache turned S3 off.
        tls.handshake(
            name=f"TLS to {me.s3.bucket_host}:{me.s3.endpoint_port}",
            python=f"{e.venv}/bin/python",
            server=me.s3.bucket_host,
            port=me.s3.endpoint_port,
            timeout=TLS_TIMEOUT,
        )
