"""pyinfra is pinned exactly, and the internals kvceph leans on are the code it was written for.

deploys/compat.py wraps pyinfra's SSH connector; deploys/facts/memo.py reads pyinfra's run
state. Each names what it assumes (``RELIES_ON``); a pyinfra release that changes any of it
fails here, by name, before a deploy can break on it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import re
from pathlib import Path

from deploys import compat
from deploys.facts import memo

ROOT = Path(__file__).resolve().parents[2]
# sha256 (first 16 hex digits) of the source of each piece, as pyinfra 3.10.0 has it.
RECORDED = {
    "pyinfra.api.facts:_get_fact": "4bae739f846172aa",
    "pyinfra.api.operation:OperationMeta.executed": "2bcf86d4b249a922",
    "pyinfra.api.operation:OperationMeta.set_complete": "b7c56db84f9e1118",
    "pyinfra.api.operations:_run_host_op": "699174f70828f914",
    "pyinfra.api.state:State.init": "0d730bb453f36c10",
    "pyinfra.api.state:StateOperationHostData": "26e828cbcf79c5c4",
    "pyinfra.connectors.ssh:SSHConnector.get_file": "97169a24d1cf0b15",
    "pyinfra.connectors.ssh:SSHConnector.get_file_transfer_connection": "3cfb3533ea81b864",
    "pyinfra.connectors.ssh:SSHConnector.put_file": "29cb1f2ef3d027a2",
    "pyinfra.connectors.ssh:SSHConnector.run_shell_command": "6e742d04535439d4",
}


def _digest(ref: str) -> str:
    """The recorded form of ``module:qualname``'s source (compat's wrapper unwrapped)."""
    module, qualname = ref.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    obj = inspect.unwrap(obj.fget if isinstance(obj, property) else obj)
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


def test_pyinfra_is_pinned_exactly_and_installed_as_pinned():
    pins = re.findall(r'"pyinfra([=<>!~]=?[^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert pins == ["==3.10.0"], pins
    assert importlib.metadata.version("pyinfra") == "3.10.0"


def test_every_internal_relied_on_is_recorded():
    assert set(compat.RELIES_ON) | set(memo.RELIES_ON) == set(RECORDED)


def test_the_internals_are_the_code_the_work_arounds_were_written_for():
    changed = [ref for ref, digest in RECORDED.items() if _digest(ref) != digest]
    assert not changed, (
        f"pyinfra {importlib.metadata.version('pyinfra')} changed {', '.join(changed)}: re-read "
        "deploys/compat.py and deploys/facts/memo.py against it (drop a work-around pyinfra no "
        "longer needs), then record the new digests here and the pin in pyproject.toml"
    )
