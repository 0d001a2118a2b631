"""kvceph's LMCache connector on the lab (issue 20; the default since issue 37 item 2): the lab's
first converge installs the controller's wheel into every engine venv (no index on the hosts),
renders lmcache.yaml as an LMCache plugin, and the lab engine loads it as LMCache 0.5.6 does; a
second run changes nothing. An engine that started without the plugin serves with no remote tier
(LMCache only logs it): readiness fails naming LMCache's line, and passes again once the engine
restarts.
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import HOSTS, INFERENCE, pyinfra, s3_client, ssh
from lab_client import completion, long_prompt

from deploys import connector_package

# The default, named anyway: these tests are about kvceph's connector whatever the default.
ON = ("--data", "kvceph_lmcache_connector=kvceph")
# Put admission at a fixed crossover of 4 chunks (1024 tokens): issue 37 item 4.
ADMISSION = (*ON, "--data", "kvceph_min_hit_tokens=1024", "--data", "kvceph_skip_short_puts=True")
# The engine's venv through its link; the operation names the venv as the plan shows it (the
# profile's digest venv, issue 35).
VENV = "/opt/kvceph/engines/vllm"
WHEEL = connector_package.current()
INSTALL = f"Engine software | kvceph connector {WHEEL.version} in /opt/kvceph/venv-<digest>"


@pytest.fixture(scope="module")
def kvceph_on(lab, converged):
    """(the lab's first converge, fresh or not; a run with kvceph's connector after it)."""
    second = pyinfra(*ON)
    try:
        yield lab, converged, second
    finally:
        restore = pyinfra(json_out=False)
        assert restore.rc == 0, restore.output[-4000:]


def test_connector_installed_loaded_and_idempotent(kvceph_on):
    lab, first, second = kvceph_on
    assert first.rc == 0, first.output[-4000:]
    if lab["fresh"]:  # KVCEPH_KEEP_LAB reuses a lab whose venvs have it already
        changed = set(first.changed())
        assert {(INSTALL, h) for h in INFERENCE} <= changed, sorted(changed)
    assert "kvceph: crossover of cache group" in first.output
    for host in INFERENCE:
        config = yaml.safe_load(ssh(host, "cat /etc/kvceph/lmcache.yaml").stdout)
        assert config["remote_storage_plugins"] == ["kvceph"] and "remote_url" not in config
        assert config["extra_config"]["kvceph.min_hit_tokens"] == 0  # nothing measured here
        probe = (
            f"{VENV}/bin/python -c 'import importlib.metadata as m; "
            'print(m.version("kvceph-connector"))\''
        )
        assert ssh(host, probe).stdout.strip() == WHEEL.version
    journal = ssh("gpu1", "journalctl -u vllm --no-pager -q -o cat | tail -n 400").stdout
    assert "Connection initialized/re-established at plugin://kvceph" in journal
    # Second run: same wheel bytes, same content in the venv, same digest: nothing to do.
    assert second.rc == 0, second.output[-4000:]
    assert second.changed() == [], second.changed()


def test_engine_without_its_plugin_fails_readiness_naming_the_cause(kvceph_on):
    # What an operator's hand-made venv change does: the engine restarts without the plugin.
    ssh("gpu1", f"{VENV}/bin/python -m pip uninstall -q -y kvceph-connector")
    ssh("gpu1", "timeout 120 systemctl restart vllm")
    broken = pyinfra(*ON, json_out=False)
    assert broken.rc != 0
    failure = next(x for x in broken.output.splitlines() if "serves with no remote tier" in x)
    assert "gpu1: vllm.service serves with no remote tier: LMCache logged " in failure
    assert "No adapter found for URL: plugin://kvceph" in failure
    assert not [x for x in broken.output.splitlines() if "no remote tier" in x and "gpu1" not in x]
    # The run put the connector back; the digest is unchanged, so the engine is restarted by
    # hand, as the message says, and the next run is clean.
    ssh("gpu1", f"{VENV}/bin/python -c 'import kvceph_connector'")  # fails the test if absent
    ssh("gpu1", "timeout 120 systemctl restart vllm")
    healed = pyinfra(*ON)
    assert healed.rc == 0, healed.output[-4000:]
    assert healed.changed() == [], json.dumps(healed.changed())


def _objects() -> int:
    pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket="lmcache")
    return sum(page.get("KeyCount", 0) for page in pages)


def _written(prompt: str) -> int:
    """Objects one cold request to gpu1 wrote (the lab engine answers after its puts)."""
    before = _objects()
    completion(HOSTS["gpu1"], prompt, max_tokens=1)
    return _objects() - before


def test_skip_short_puts_writes_no_object_for_a_request_below_the_crossover(kvceph_on):
    """Runs after the tests above (module order): the module's fixture restores the lab."""
    # Off (the state the tests above leave: admission off, crossover 0): a short request writes.
    short, long = 600, 1300  # words = tokens: 2 and 5 full chunks of 256, TP 2
    assert _written(long_prompt(short)) == 4
    run = pyinfra(*ADMISSION)
    assert run.rc == 0, run.output[-4000:]
    assert "  kvceph.skip_short_puts: true" in ssh("gpu1", "cat /etc/kvceph/lmcache.yaml").stdout
    assert _written(long_prompt(short)) == 0  # 2 chunks < 4: such a hit would report 0 anyway
    assert _written(long_prompt(long)) == 10  # every chunk of a request at the crossover
    journal = ssh("gpu1", "journalctl -u vllm --no-pager -q -o cat | tail -n 200").stdout
    assert "min_hit_tokens 1024, skip_short_puts" in journal
    assert "kvceph: skip_short_puts since start: skipped" in journal
