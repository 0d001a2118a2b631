"""The example inventory's rendered files and the recorded fixtures, byte for byte.

A guard for changes that must not change behaviour (a module moved, an import renamed): every
file kvceph renders for ``inventories/example.py``'s hosts (group_data all -> role -> example)
equals its committed copy in ``tests/fixtures/golden/example/``, and every recorded fact and
operation fixture (``tests/facts/``, ``tests/operations/``) has the sha256 that
``tests/fixtures/golden/fixtures.sha256`` lists. A change that is meant to change them
rewrites both: ``KVCEPH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
from pathlib import Path

import pytest

from deploys import render, settings, specs
from deploys.settings import group_data
from deploys.settings.secrets import Secret, Secrets

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
EXAMPLE = GOLDEN / "example"
MANIFEST = GOLDEN / "fixtures.sha256"
FIXTURES = ("tests/facts", "tests/operations")
UPDATE = os.environ.get("KVCEPH_UPDATE_GOLDEN") == "1"
ROLES = ("ceph_admin", "rgw", "gpu", "gaudi")
# Made-up keys: the rendered credentials and secrets files show where each one lands.
CREDS = Secrets(
    Secret("AKIAGOLDEN0000000000"),
    Secret("golden/secret+key0000"),
    "golden",
    vllm_api_key=Secret("golden-api-key"),
    hash_seed=Secret("12345"),
)


def example_hosts() -> list[tuple[str, str, dict]]:
    """(host, role, host data) of every host in inventories/example.py, in file order."""
    names = runpy.run_path(str(ROOT / "inventories" / "example.py"))
    hosts = []
    for role in ROLES:
        for entry in names.get(role, []):
            host, data = entry if isinstance(entry, tuple) else (entry, {})
            hosts.append((host, role, data))
    return hosts


def rendered(host: str, role: str, data: dict) -> dict[str, str]:
    """Every file kvceph renders for one example host: name -> text."""
    groups = (role, "example")
    me = settings.load({**group_data.read(("all", *groups)), **data}, host, groups)
    files: dict[str, str] = {}
    if role == "ceph_admin":
        rgw = me.rgw
        files["rgw.spec.json"] = json.dumps(specs.rgw_spec(rgw), indent=1, sort_keys=True)
        if rgw.ingress_virtual_ips:
            files["ingress.spec.json"] = json.dumps(
                specs.ingress_spec(rgw), indent=1, sort_keys=True
            )
        files["rgw.spec.yaml"] = specs.dump(specs.rgw_spec(rgw))
    if role in ("gpu", "gaudi"):
        files["lmcache.yaml"] = render.lmcache_yaml(me)
        files["aws-config"] = render.aws_config(me)
        files["aws-credentials"] = render.aws_credentials(me, CREDS)
        files["hosts-lines"] = "\n".join(render.hosts_lines(me)) + "\n"
        files["secrets.env"] = render.secrets_env_file(CREDS).reveal()
        files["kv-transfer.json"] = render.kv_transfer_json(me)
        for engine in me.engine.engines:
            digest = render.digest(me, CREDS, engine)
            files[engine.unit] = render.unit(me, engine)
            files[engine.env_name] = render.env_file(me, digest, engine)
            files[f"{engine.unit}.digest"] = digest + "\n"
    return files


# The committed copies hold a placeholder where each key lands, not the key (no key-shaped
# literal in the tree); the rendered text must hold the key itself there.
MASKS = {
    CREDS.access_key.reveal(): "<s3-access-key>",
    CREDS.secret_key.reveal(): "<s3-secret-key>",
    CREDS.vllm_api_key.reveal(): "<vllm-api-key>",
}


def _masked(text: str) -> str:
    for value, placeholder in MASKS.items():
        assert placeholder not in text, f"{placeholder} rendered literally"
        text = text.replace(value, placeholder)
    return text


def _check(path: Path, text: str) -> None:
    text = _masked(text)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path.relative_to(ROOT)} missing: KVCEPH_UPDATE_GOLDEN=1 writes it"
    assert path.read_text() == text, (
        f"{path.relative_to(ROOT)} differs from what kvceph renders now; a change meant to "
        "change it: KVCEPH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_golden.py"
    )


@pytest.mark.parametrize("host,role,data", example_hosts(), ids=lambda v: str(v))
def test_example_inventory_renders_the_committed_files(host, role, data):
    files = rendered(host, role, data)
    if role in ("ceph_admin", "gpu", "gaudi"):
        assert files, f"{host}: nothing rendered"
    for name, text in files.items():
        _check(EXAMPLE / host / name, text)
    if EXAMPLE.joinpath(host).is_dir():
        extra = {p.name for p in EXAMPLE.joinpath(host).iterdir()} - set(files)
        assert not extra, f"{host}: committed but no longer rendered: {sorted(extra)}"


def _fixture_hashes() -> str:
    lines = []
    for top in FIXTURES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                lines.append(f"{digest}  {path.relative_to(ROOT)}")
    return "\n".join(lines) + "\n"


def test_recorded_fixtures_are_the_committed_bytes():
    now = dict(line.split("  ", 1)[::-1] for line in _fixture_hashes().splitlines())
    if UPDATE:
        MANIFEST.write_text(_fixture_hashes())
    listed = dict(line.split("  ", 1)[::-1] for line in MANIFEST.read_text().splitlines())
    # A fixture added since the manifest was written is no change to a recorded one.
    changed = sorted(p for p, h in listed.items() if now.get(p) != h)
    assert not changed, (
        f"recorded fixtures changed or gone: {changed[:5]} ({len(changed)}); a change meant "
        "to: KVCEPH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_golden.py"
    )
