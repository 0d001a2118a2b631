"""kvceph's LMCache connector as it travels: a wheel built on the controller from ``connector/``.

Pure module (no pyinfra): the engine-software stage uploads the wheel and installs it with
``pip install --no-deps --no-index`` from the file (inference hosts need no index), and the
settings check refuses an LMCache the package does not support before any host is touched.

The wheel is built here, not by pip: ``connector/`` is pure Python, and a wheel written with
fixed timestamps and sorted entries has the same bytes on every run and every controller, so
the upload is a no-op on a converged host. A package is identified by its version and
``content``: sha256 over the RECORD lines of its own files (path, sha256, size). pip copies those
lines into the installed RECORD, so the host's venv reports the same figure (facts/connector.py)
and an unchanged package is never reinstalled, a changed one always is (same version or not).
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import io
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from deploys import paths

ROOT = paths.CONNECTOR_SOURCE
PACKAGE = "kvceph_connector"
DISTRIBUTION = "kvceph-connector"
HOST_DIR = paths.CONNECTOR_DIR
# The plugin LMCache loads (the contract between connector/ and lmcache.yaml).
PLUGIN_NAME = "kvceph"
MODULE_PATH = f"{PACKAGE}.lmcache_plugin"
CLASS_NAME = "KvcephConnectorAdapter"
# MP mode: the native_plugin LMCache's server loads (--l2-adapter), and the vLLM unit's wait
# for that server (ExecStartPre).
MP_MODULE_PATH = f"{PACKAGE}.lmcache_mp"
MP_CLASS_NAME = "KvcephMPConnector"
MP_HEALTHCHECK_MODULE = f"{PACKAGE}.healthcheck"
# 1980-01-01, the earliest time a zip entry holds: the same bytes on every build.
_EPOCH = (1980, 1, 1, 0, 0, 0)


class PackageError(ValueError):
    """connector/ cannot be packaged; the message says what to fix."""


@dataclass(frozen=True)
class Wheel:
    """A built wheel: file name, bytes, version, supported LMCache releases, content hash."""

    filename: str
    data: bytes
    version: str
    supported_lmcache: tuple[str, ...]
    content: str

    @property
    def host_path(self) -> str:
        return f"{HOST_DIR}/{self.filename}"


def _literal(tree: ast.Module, name: str, path: Path):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                break
    raise PackageError(f"controller: {path}: no literal {name} = ...; fix: define it there")


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def content_hash(record_lines) -> str:
    """sha256 over the package's own RECORD lines (hashed files only: no .pyc, no dist-info).

    + record_lines: RECORD's lines, from the wheel or from the installed distribution
    """
    own = sorted(
        line.strip()
        for line in record_lines
        if line.startswith(f"{PACKAGE}/") and ",sha256=" in line and ".pyc," not in line
    )
    return hashlib.sha256("\n".join(own).encode()).hexdigest()


def _metadata(project: dict, version: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project.get('name', DISTRIBUTION)}",
        f"Version: {version}",
    ]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def build(root: Path = ROOT) -> Wheel:
    """The connector's wheel, built from ``root`` (``connector/``): same source, same bytes.

    + root: the package directory (pyproject.toml, src/kvceph_connector/)
    """
    pyproject, src = root / "pyproject.toml", root / "src" / PACKAGE
    init = src / "__init__.py"
    if not pyproject.is_file() or not init.is_file():
        raise PackageError(
            f"controller: {root}: no pyproject.toml or src/{PACKAGE}/__init__.py; fix: run from "
            "a kvceph checkout that has connector/, or set kvceph_lmcache_connector lmcache"
        )
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    if project.get("name", DISTRIBUTION) != DISTRIBUTION:
        raise PackageError(f"controller: {pyproject}: project name is not {DISTRIBUTION}")
    if project.get("scripts") or project.get("entry-points") or project.get("gui-scripts"):
        raise PackageError(
            f"controller: {pyproject}: entry points are not packaged by deploys/"
            "connector_package.py; fix: teach it, or drop them"
        )
    tree = ast.parse(init.read_text())
    version = str(_literal(tree, "__version__", init))
    supported = tuple(str(v) for v in _literal(tree, "SUPPORTED_LMCACHE", init))
    if project.get("version") not in (None, version):
        raise PackageError(
            f"controller: {pyproject}: version {project['version']} differs from "
            f"__version__ {version}; fix: keep one (dynamic = ['version'])"
        )
    files = sorted(
        p
        for p in src.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )
    entries = [(f"{PACKAGE}/{p.relative_to(src).as_posix()}", p.read_bytes()) for p in files]
    dist_info = f"{PACKAGE}-{version}.dist-info"
    entries += [
        (f"{dist_info}/METADATA", _metadata(project, version).encode()),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: kvceph\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
    ]
    record = [_record_line(path, data) for path, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in entries:
            info = zipfile.ZipInfo(path, _EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    return Wheel(
        filename=f"{PACKAGE}-{version}-py3-none-any.whl",
        data=buffer.getvalue(),
        version=version,
        supported_lmcache=supported,
        content=content_hash(record),
    )


@functools.cache
def current() -> Wheel:
    """``build()`` of this checkout's connector/, once per process (a run's every caller
    sees the same wheel)."""
    return build(ROOT)


def lmcache_refusal(host: str, lmcache_version: str, wheel: Wheel) -> str | None:
    """One line refusing an LMCache release the connector does not support, or None.

    + host: the inference host
    + lmcache_version: the engine profile's LMCache pin
    + wheel: the connector as built from ``connector/``
    """
    if str(lmcache_version).split("+")[0] in wheel.supported_lmcache:
        return None
    return (
        f"{host}: kvceph_lmcache_connector = 'kvceph': kvceph-connector {wheel.version} supports "
        f"LMCache {', '.join(wheel.supported_lmcache)}, the engine profile pins "
        f"{lmcache_version}; fix: pin a supported LMCache or set kvceph_lmcache_connector "
        "'lmcache'"
    )
