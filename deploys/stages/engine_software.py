"""Stage 3: the service user and the pinned engine (vLLM or the lab engine + LMCache) in a venv.

A replaced node arrives blank, so this stage creates everything the later stages assume. The
versions it finds decide whether pip runs at all, and a host whose engine version does not
match its profile is refused: the kv-transfer JSON and the LMCache YAML are version-specific.
"""

from __future__ import annotations

from pathlib import Path

from pyinfra import host, inventory, logger, state
from pyinfra.api import DeployError, deploy
from pyinfra.operations import files

from deploys import paths, preflight
from deploys.engine import engine_lock, versions
from deploys.facts import memo
from deploys.facts.engine import EngineVersions
from deploys.operations import engine as engine_ops
from deploys.operations import files as kvfiles
from deploys.settings import HostSettings
from deploys.settings.engine import EngineProfile
from deploys.settings.inventory import python_minor_mismatch
from deploys.stages import tier_software
from deploys.tier import connector_package

# The real engine. A profile that does not pin it ships an engine that *emulates* vLLM (the
# lab engine): its vLLM version is the profile's declared vllm_version.
VLLM = "vllm"
LMCACHE = "lmcache"


def engine_distribution(profile: EngineProfile) -> str:
    """The distribution that provides the engine: ``vllm`` when pinned, else the one other pin.

    Raises ValueError when the profile does not say it unambiguously.
    """
    pins = engine_ops.parse_pins(profile.packages)
    if VLLM in pins:
        return VLLM
    others = [n for n in pins if n != LMCACHE]
    if len(others) != 1:
        raise ValueError(
            f"profile {profile.name!r} pins no vllm and {len(others)} other engine packages "
            f"({', '.join(others) or 'none'}); pin vllm, or exactly one emulating engine"
        )
    return others[0]


def engine_vllm_version(
    profile: EngineProfile, installed: dict[str, str]
) -> tuple[str | None, str]:
    """(vLLM version the engine speaks, where that came from) for the installed packages."""
    dist = engine_distribution(profile)
    if dist == VLLM:
        return installed.get(VLLM), "installed vllm"
    if dist not in installed:
        return None, f"{dist} not installed"
    return profile.vllm_version, f"{dist} emulates the profile's vllm_version"


def check_versions(me: HostSettings, installed: dict[str, str]) -> str | None:
    """One-line error when the installed engine does not fit the profile, else None."""
    profile = me.engine.profile
    vllm, source = engine_vllm_version(profile, installed)
    lmc = installed.get(LMCACHE)
    if vllm is None or lmc is None:
        missing = [n for n, v in ((engine_distribution(profile), vllm), (LMCACHE, lmc)) if not v]
        return (
            f"{me.host}: engine packages missing in {me.engine.venv}: {', '.join(missing)}; "
            "fix: set kvceph_engine_install True or ship an image that carries them"
        )
    if not versions.pair_supported(vllm, lmc):
        return (
            f"{me.host}: vLLM {vllm} ({source}) with LMCache {lmc} is not a supported pair; "
            f"fix: use one of {sorted(versions.SUPPORTED_PAIRS)}"
        )
    if versions.minor(vllm) != profile.vllm_minor:
        return (
            f"{me.host}: installed vLLM {vllm} ({source}) differs from the profile's "
            f"vllm_version {profile.vllm_version}: the rendered config would be for the wrong "
            "version; fix: kvceph_engine_profile.vllm_version or reinstall"
        )
    if versions.lmcache_key(lmc) != versions.lmcache_key(profile.lmcache_version):
        return (
            f"{me.host}: installed LMCache {lmc} differs from the profile's "
            f"{profile.lmcache_version}; fix: the profile or reinstall"
        )
    return None


def python_minor_error(me: HostSettings, checked, get_python) -> str | None:
    """With LMCache's builtin hash, every host of the cache group must run one Python minor.

    ``get_python(host_name) -> "3.11.2" | None`` reads the EngineVersions fact of that host.
    """
    if me.lmcache.hash_algorithm != "builtin":
        return None
    group = next((g for g in checked.cache_groups if me.host in g.hosts), None)
    if group is None:
        return None
    pythons = {}
    for name in group.hosts:
        version = get_python(name)
        if version:
            pythons[name] = versions.minor(version)
    return python_minor_mismatch(group, "builtin", pythons)


def wheels(directory: str, key: str = "kvceph_engine_wheelhouse") -> list[Path]:
    """The controller's wheelhouse files, sorted; raises DeployError when there are none.

    + directory: the wheelhouse on the controller
    + key: the setting that names it (the router has its own)
    """
    path = Path(directory)
    found = sorted(path.glob("*.whl")) if path.is_dir() else []
    if not found:
        raise DeployError(
            f"controller: {key} = {directory!r}: no *.whl files there; "
            "fix: build the wheelhouse (pip wheel / pip download) or unset it"
        )
    return found


def prune_args(me: HostSettings) -> dict:
    """``engine.pruned_venvs``'s arguments for the host (both calls: before the install, after
    the roll)."""
    e = me.engine
    return {
        "base": e.venv_base,
        "venv": e.venv,
        "links": [e.venv_link(engine.unit) for engine in e.engines],
        "upload": [w.name for w in wheels(e.wheelhouse)] if e.wheelhouse else [],
        "lock_text": e.lock_text,
    }


@deploy("Engine software")
def apply(me: HostSettings) -> None:
    _engine_packages(me)
    # kvceph's connector (when chosen) and LMCache's compiled ops: deploys/stages/tier_software.py.
    tier_software.apply(me)
    _same_packages(me)


def _same_packages(me: HostSettings) -> None:
    """Every host of the cache group runs the same packages, read after everything kvceph
    installs (a connector removed by hand is put back above, not refused here)."""
    if not me.engine.install:
        return
    checked = preflight.run(state, inventory)
    group = next((g for g in checked.cache_groups if me.host in g.hosts), None)
    if group is not None:
        label = f"{group.model} TP {group.tensor_parallel_size}"
        # The digest does not cover the connector choice: a venv made while kvceph's connector
        # was chosen keeps it after a switch back, and a host added since lacks it.
        unused = () if me.lmcache.tier.connector == "kvceph" else (connector_package.DISTRIBUTION,)
        engine_ops.same_packages(
            name="Cache group: identical engine packages",
            group=label,
            venvs={h: checked.hosts[h].engine.venv for h in group.hosts},
            ignore=unused,
        )


def _engine_packages(me: HostSettings) -> None:
    """The service account, its home, and the pinned engine packages in the venv."""
    e = me.engine
    pins = engine_ops.parse_pins(e.profile.packages)
    engine_distribution(e.profile)  # fail early on an ambiguous profile
    engine_ops.service_account(
        name=f"Service account {e.service_user}", user=e.service_user, home=e.service_home
    )
    kvfiles.named_directory("Service home", e.service_home, "0750", owner=e.service_user)

    if me.lmcache.hash_algorithm == "builtin":
        # Python's hash() differs across minors: read every group member's venv Python.
        checked = preflight.run(state, inventory)

        def python_of(name: str) -> str | None:
            venv = checked.hosts[name].engine.venv
            return memo.read(inventory.get_host(name), EngineVersions, venv=venv).get("python")

        error = python_minor_error(me, checked, python_of)
        if error:
            raise DeployError(error)

    if not e.install:
        # The image carries the engine: only check it.
        installed = memo.read(host, EngineVersions, venv=e.venv).get("packages", {})
        error = check_versions(me, installed)
        if error:
            raise DeployError(error)
        _log_version(me, installed)
        return

    # The pins are what pip will leave installed, so they are what is checked.
    error = check_versions(me, pins)
    if error:
        raise DeployError(error)
    _log_version(me, pins)

    # Before the install, so the disk check's "free after pruning" is what pip finds: only
    # what no rollback needs (the venv the engines run and the newest other stay).
    engine_ops.pruned_venvs(
        name="Prune old engine venvs and wheels (before the install)",
        when="install",
        **prune_args(me),
    )
    installed = memo.read(host, EngineVersions, venv=e.venv).get("packages", {})
    if e.lock_text is not None:
        todo = engine_ops.missing_locked(engine_lock.parse(e.lock_text), installed)
    else:
        todo = engine_ops.missing_pins(pins, installed)
        logger.warning(
            "kvceph: %s: profile %s has no lock (kvceph_engine_lock): pip resolves its "
            "dependencies on each host; the group check below refuses hosts that differ",
            me.host,
            e.profile.name,
        )
    find_links = None
    if e.wheelhouse:
        find_links = paths.WHEELHOUSE
        if not todo:
            # The wheels only feed pip: a venv with every pin needs none of them. Checking 2-3
            # facts per wheel was half of a converged re-run's round trips (bench/README.md).
            wheels(e.wheelhouse)  # still refuse an empty wheelhouse setting
            _venv_packages(me, find_links)
            return
        kvfiles.directory(name="Wheelhouse directory", path=find_links, mode="0755")
        for wheel in wheels(e.wheelhouse):
            files.put(
                name=f"Wheel {wheel.name}",
                src=str(wheel),
                dest=f"{find_links}/{wheel.name}",
                mode="0644",
            )
    _venv_packages(me, find_links)


def _venv_packages(me: HostSettings, find_links) -> None:
    """The profile's venv (a new one beside the engines' for a new profile) and its packages:
    from the lock with hashes where there is one; then every host of the cache group is
    checked to run the same distributions."""
    e = me.engine
    kvfiles.directory(name="Venv parent", path=str(Path(e.venv).parent), mode="0755")
    if e.lock_text is None:
        engine_ops.venv_packages(
            name=f"Engine packages in {e.venv_label}",
            venv=e.venv,
            packages=list(e.profile.packages),
            index_url=None if find_links else e.index_url,
            find_links=find_links,
            # An emulating engine needs LMCache only for its config loader, not torch & co.
            no_deps=[] if engine_distribution(e.profile) == VLLM else [LMCACHE],
        )
    else:
        lock_path = f"{paths.ENGINE_LOCK_DIR}/{Path(e.venv).name}.txt"
        kvfiles.directory(name="Engine lock directory", path=paths.ENGINE_LOCK_DIR, mode="0755")
        kvfiles.atomic_file(name=f"Engine lock {lock_path}", path=lock_path, content=e.lock_text)
        engine_ops.locked_venv(
            name=f"Engine packages in {e.venv_label} (locked: {e.lock_source})",
            venv=e.venv,
            lock_path=lock_path,
            lock_text=e.lock_text,
            index_url=None if find_links else e.index_url,
            find_links=find_links,
        )


def _log_version(me: HostSettings, installed: dict[str, str]) -> None:
    vllm, source = engine_vllm_version(me.engine.profile, installed)
    if engine_distribution(me.engine.profile) != VLLM:
        logger.info("%s: vLLM version %s: %s", me.host, vllm, source)
