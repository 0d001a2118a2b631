"""connector_package: the connector's wheel built on the controller, byte-for-byte the same on
every run, installable by pip from the file, identified on the host by the same content hash."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from deploys.facts import connector as facts
from deploys.tier import connector_package as cp


def test_same_source_same_bytes():
    one, two = cp.build(), cp.build()
    assert one.data == two.data and one.content == two.content
    assert one.filename == f"kvceph_connector-{one.version}-py3-none-any.whl"
    assert "0.5.6" in one.supported_lmcache
    names = zipfile.ZipFile(__import__("io").BytesIO(one.data)).namelist()
    assert "kvceph_connector/lmcache_plugin.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def _copy(tmp_path) -> Path:
    root = tmp_path / "connector"
    shutil.copytree(cp.ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "tests"))
    return root


def test_a_changed_file_changes_the_content_not_the_version(tmp_path):
    root = _copy(tmp_path)
    before = cp.build(root)
    plugin = root / "src/kvceph_connector/lmcache_plugin.py"
    plugin.write_text(plugin.read_text() + "\n# changed\n")
    after = cp.build(root)
    assert after.version == before.version and after.content != before.content


def test_pip_installs_it_and_the_host_fact_reads_the_same_content(tmp_path):
    """pip (the one the hosts run) installs the wheel from the file with --no-deps --no-index;
    the ConnectorInstalled script then reports the controller's version and content hash."""
    wheel = cp.build()
    path = tmp_path / wheel.filename
    path.write_bytes(wheel.data)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-index", "--no-deps", "--target", str(target), str(path)],
        check=True, timeout=120,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", facts._CONNECTOR_SCRIPT],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(target)},
    )  # fmt: skip
    assert json.loads(done.stdout) == {"version": wheel.version, "content": wheel.content}


def test_unpackageable_trees_are_one_line_errors(tmp_path):
    with pytest.raises(cp.PackageError, match="no pyproject.toml"):
        cp.build(tmp_path / "nothing")
    root = _copy(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('dynamic = ["version"]', 'version = "9"'))
    with pytest.raises(cp.PackageError, match="differs from __version__"):
        cp.build(root)


def test_unsupported_lmcache_is_refused_in_one_line():
    wheel = cp.build()
    assert cp.lmcache_refusal("gpu1", "0.5.6", wheel) is None
    refusal = cp.lmcache_refusal("gpu1", "0.5.7", wheel)
    assert refusal.startswith("gpu1: kvceph_lmcache_connector = 'kvceph': ")
    assert "pins 0.5.7" in refusal and "; fix: " in refusal and "\n" not in refusal
