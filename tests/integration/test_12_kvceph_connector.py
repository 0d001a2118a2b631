"""kvceph's LMCache connector on the lab (issue 20; the default since issue 37 item 2): the lab's
first converge installs the controller's wheel into every engine venv (no index on the hosts),
renders lmcache.yaml as an LMCache plugin, and the lab engine loads it as LMCache 0.5.6 does; a
second run changes nothing. An engine that started without the plugin serves with no remote tier
(LMCache only logs it): readiness fails naming LMCache's line, and passes again once the engine
restarts. One chunk's body altered in the bucket at the same size (issue 50 item 1): with the GET
crc32c check off verify.py fails the warm step naming the first differing token (the lab
engine's answer is drawn from the KV bytes it loaded); with it on the body is refused, a miss,
and verify.py passes.
"""

from __future__ import annotations

import json
import threading

import pytest
import yaml
from conftest import (
    GPU_KEY_PREFIX,
    HOSTS,
    INFERENCE,
    REPORTS,
    S3_ADMIN_URL,
    path_style_client,
    pyinfra,
    s3_client,
    secrets,
    ssh,
)
from lab_client import completion, long_prompt

from deploys.tier import connector_package
from deploys.verification import verdicts

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


GPU_PREFIX = GPU_KEY_PREFIX  # the GPU cache group's (TP 2) objects, in its namespace
LMCACHE_YAML = "/etc/kvceph/lmcache.yaml"


def _gpu_client():
    """The GPU group's own key: it reads and writes the group's objects as its engines do."""
    keys = secrets()
    return path_style_client(
        S3_ADMIN_URL, keys["KVCEPH_S3_ACCESS_KEY_GPU"], keys["KVCEPH_S3_SECRET_KEY_GPU"]
    )


def _gpu_keys(s3) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="lmcache", Prefix=GPU_PREFIX)
    return {o["Key"] for page in pages for o in page.get("Contents", ())}


def _alter_first_new_chunk(before: set[str], stop: threading.Event, altered: list) -> None:
    """Once the cold request stored a chunk of the GPU group, flip one byte of its body: same
    size, the crc32c its PUT stored kept (what a disk or a proxy would do, unseen by a HEAD)."""
    s3 = _gpu_client()
    while not stop.wait(0.2):
        new = sorted(_gpu_keys(s3) - before)
        if new:
            got = s3.get_object(Bucket="lmcache", Key=new[0])
            body = bytearray(got["Body"].read())
            body[len(body) // 2] ^= 0xFF
            s3.put_object(Bucket="lmcache", Key=new[0], Body=bytes(body), Metadata=got["Metadata"])
            altered.append(new[0])
            return


def _write_and_restart(host: str, text: str) -> None:
    # reset-failed: this module restarts the engines more often than the unit's start limit
    # allows in its interval (systemd refuses the start, "attempted too often")
    ssh(
        host,
        f"cat > {LMCACHE_YAML} <<'EOF'\n{text}EOF\n"
        "systemctl reset-failed vllm; timeout 120 systemctl restart vllm",
    )


def _crc_check(on: bool, rendered: dict[str, str]) -> None:
    """kvceph.verify_crc32c set by hand in the GPU engines' lmcache.yaml (``rendered``: the
    deploy's files), explicitly both ways (the default may be either), the engines restarted
    on it (a deploy per setting would cost ~40 s each)."""
    for host, text in rendered.items():
        config = yaml.safe_load(text)
        config["extra_config"]["kvceph.verify_crc32c"] = on
        _write_and_restart(host, yaml.safe_dump(config, sort_keys=False))


def _verify_with_an_altered_chunk():
    """verify.py with one of its document's GPU chunks altered after the cold request wrote it:
    (the run, the report, the altered key)."""
    before = _gpu_keys(s3_client())
    stop, altered = threading.Event(), []
    watcher = threading.Thread(target=_alter_first_new_chunk, args=(before, stop, altered))
    watcher.start()
    try:
        run = pyinfra(
            *ON, "--data", "kvceph_verify_document_tokens=2048", deploy="verify.py",
            json_out=False, timeout=600,
        )  # fmt: skip
    finally:
        stop.set()
        watcher.join(timeout=30)
    assert altered, run.output[-3000:]
    return run, json.loads((REPORTS / "verify-latest.json").read_text()), altered[0]


def test_an_altered_chunk_fails_the_answer_unless_the_crc32c_check_refuses_it(kvceph_on):
    rendered = {h: ssh(h, f"cat {LMCACHE_YAML}").stdout for h in ("gpu1", "gpu2")}
    try:
        _crc_check(False, rendered)
        run, report, _ = _verify_with_an_altered_chunk()
        assert run.rc != 0
        steps = {(s["host"], s["step"]): s for s in report["steps"]}
        writer = next(h for h, step in steps if step == "warm" and h.startswith("gpu"))
        warm = steps[(writer, "warm")]
        assert warm["verdict"] == "fail", warm
        assert (
            f"wrong answer from S3 after restart on {writer}: first differing token at "
            in (warm["message"])
        )
        assert warm["figures"]["answer"]["first_difference"] is not None
        # every chunk loaded: only the answer shows the fault
        assert warm["hit_tokens"] == warm["figures"]["expected_hit_tokens"] > 0
        failed = [x for x in run.output.splitlines() if "kvceph verify FAILED:" in x]
        assert any(f"{writer}: warm: wrong answer from S3 after restart" in x for x in failed)
        if (writer, "dram") in steps:  # the DRAM tier held the bytes computed
            assert steps[(writer, "dram")]["verdict"] == "pass", steps[(writer, "dram")]
        assert steps[("gaudi1", "warm")]["verdict"] != "fail"  # another group's objects

        _crc_check(True, rendered)
        run, report, _ = _verify_with_an_altered_chunk()
        assert run.rc == 0, run.output[-5000:]
        steps = {(s["host"], s["step"]): s for s in report["steps"]}
        warm = steps[(writer, "warm")]
        assert warm["verdict"] == "warn" and "refused GET bodies whose crc32c" in warm["message"]
        assert warm["figures"]["answer"]["equal"] is True
        journal = ssh(writer, "journalctl -u vllm --no-pager -q -o cat | tail -n 400").stdout
        assert verdicts.LOG_CHECKSUM in journal  # kvceph's connector says why (s3core)
    finally:
        for host, text in rendered.items():
            _write_and_restart(host, text)


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
