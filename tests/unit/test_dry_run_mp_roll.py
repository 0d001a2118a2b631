"""The roll between in-process and LMCache's MP mode, planned by the whole deploy with ``--dry``
against pyinfra's ``@fake`` connector (tests/inventories/fake_mp_roll.py, fake_mp_rollback.py):
what an operator reads before anything restarts (issue 51 item 2)."""

from __future__ import annotations

import re

import pytest
from fake_deploy import run

GPU = ("@fake/gpu1", "@fake/gpu2")
SERVER = "lmcache-server.service"


def _changed(out: str) -> dict[str, str]:
    """Operation name -> its Change column, from pyinfra's plan table."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^\s{4}(\S.*?\S)\s{2,}(-|\d+ \([^)]*\))\s{2,}", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def _order(out: str) -> list[str]:
    return list(_changed(out))


@pytest.fixture(scope="module")
def to_mp():
    rc, out = run("tests/inventories/fake_mp_roll.py", "--dry")
    assert rc == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def back():
    rc, out = run("tests/inventories/fake_mp_rollback.py", "--dry")
    assert rc == 0, out[-3000:]
    return out


def test_the_roll_to_mp_starts_the_server_before_the_engines_restart(to_mp):
    rows, order = _changed(to_mp), _order(to_mp)
    both = "2 (@fake/gpu1, @fake/gpu2)"
    unit = f"vLLM service | Unit /etc/systemd/system/{SERVER}"
    start = f"vLLM service | Start {SERVER}"
    roll = "vLLM service | Rolling restart of vllm.service"
    assert rows[unit] == rows[start] == rows[roll] == both  # not gaudi1: it stays in process
    assert order.index(unit) < order.index(start) < order.index(roll)
    assert not any("Remove" in name for name in order)


def test_the_roll_to_mp_says_per_host_what_happens_and_that_it_starts_cold(to_mp):
    for host in GPU:
        assert (
            f"kvceph: {host} vllm.service: vLLM 0.33.0 -> 0.34.0, LMCache 0.5.6, in-process -> "
            "MP: the object names change"
        ) in to_mp
        assert f"kvceph: {host}: {SERVER} is written and started before any engine restarts" in (
            to_mp
        )
        assert (
            f"kvceph: {host}: until the cache group's last engine rolled, in-process and MP "
            "engines serve side by side: both namespaces are live"
        ) in to_mp
    assert "@bfloat16@c256@kv-packed@naive@none@mp-lmcache0.5/..." in to_mp
    assert "the new engines start with an empty tier" in to_mp
    assert "kvceph: @fake/gaudi1: " + SERVER not in to_mp
    # the in-process namespace line would name names MP does not use
    assert "@fake/gpu1: the object namespace changes" not in to_mp


def test_the_rollback_removes_the_server_after_the_engines_rolled_and_says_so(back):
    rows, order = _changed(back), _order(back)
    remove = f"vLLM service | Remove {SERVER} (the engines rolled back in process)"
    roll = "vLLM service | Rolling restart of vllm.service"
    assert rows[remove] == rows[roll] == "2 (@fake/gpu1, @fake/gpu2)"
    assert order.index(roll) < order.index(remove)
    assert not any(f"Unit /etc/systemd/system/{SERVER}" in name for name in order)
    for host in GPU:
        assert f"kvceph: {host} vllm.service: vLLM 0.34.0 -> 0.33.0, LMCache 0.5.6, MP -> " in back
        assert (
            f"kvceph: {host}: {SERVER} stays until the host's engines are back in process"
        ) in back
        assert "then it is removed" in back


def test_the_upgrade_prunes_kvcephs_old_venvs_and_wheels_and_says_what_goes(to_mp):
    """gpu1 runs R and holds kvceph's older venvs 1 (newer) and 2, an operator's digest-named
    directory e, and a wheel no lock names: before the install 2 and the wheel go (1 is R's
    rollback target), after the roll 1 too; e never (no kvceph marker)."""
    rows, venv = _changed(to_mp), "/opt/kvceph/venv-"
    assert (
        f"kvceph: @fake/gpu1: prune (install) removes {venv}{'2' * 12}, "
        "/var/cache/kvceph/wheelhouse/lmcache-0.5.4-py3-none-any.whl"
    ) in to_mp
    assert f"kvceph: @fake/gpu1: prune (roll) removes {venv}{'1' * 12}\n" in to_mp
    assert f"{venv}{'e' * 12}" not in to_mp and "@fake/gpu2: prune" not in to_mp
    before = "Engine software | Prune old engine venvs and wheels (before the install)"
    after = "vLLM service | Prune old engine venvs and wheels"
    assert rows[before] == rows[after] == "1 (@fake/gpu1)"
    order = _order(to_mp)
    assert order.index(before) < order.index("vLLM service | Rolling restart of vllm.service")
    assert order.index("vLLM service | Rolling restart of vllm.service") < order.index(after)
