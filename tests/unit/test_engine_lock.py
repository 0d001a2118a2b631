"""The engine lock (deploys/engine/engine_lock.py): rendering and parsing, venvs named by digest,
the prune's selection, and the refusal of a cache group whose hosts run different packages."""

from __future__ import annotations

import hashlib

import pytest

from deploys.engine import drain, engine_lock
from deploys.facts.engine import EngineVenvs

A, B, C = ("a" * 64, "b" * 64, "c" * 64)
WHEELS = {
    "kvceph_lab_engine-0.1.0-py3-none-any.whl": A,
    "lmcache-0.5.6-cp311-cp311-manylinux_2_17_x86_64.whl": B,
    "PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl": C,
}
PINS = {"kvceph-lab-engine": "0.1.0", "lmcache": "0.5.6"}


def test_a_wheelhouse_renders_one_hashed_pin_per_distribution_and_parses_back():
    lock = engine_lock.from_wheels(WHEELS)
    assert list(lock) == ["kvceph-lab-engine", "lmcache", "pyyaml"]
    text = engine_lock.render(lock)
    assert f"pyyaml==6.0.2 \\\n    --hash=sha256:{C}\n" in text
    assert engine_lock.parse(text) == lock
    assert engine_lock.missing_from_lock(PINS, lock) == []
    assert engine_lock.missing_from_lock({"lmcache": "0.5.7"}, lock) == ["lmcache==0.5.7"]


def test_two_wheels_of_one_version_are_two_hashes_and_two_versions_are_refused():
    two = {**WHEELS, "lmcache-0.5.6-cp312-cp312-manylinux_2_17_x86_64.whl": A}
    assert engine_lock.from_wheels(two)["lmcache"].hashes == (A, B)
    with pytest.raises(ValueError, match="holds lmcache 0.5.6 and 0.5.7: keep one"):
        engine_lock.from_wheels({**WHEELS, "lmcache-0.5.7-py3-none-any.whl": A})


def test_a_committed_lock_from_pip_compile_parses_and_anything_unlocked_is_refused():
    compiled = (
        "#\n# pip-compile --generate-hashes\n#\n"
        f"certifi==2025.1.31 \\\n    --hash=sha256:{A} \\\n    --hash=sha256:{B}\n"
        "    # via requests\n"
        f"requests==2.32.3 \\\n    --hash=sha256:{C}\n"
    )
    lock = engine_lock.parse(compiled, "locks/vllm.txt")
    assert lock["certifi"] == engine_lock.Locked("2025.1.31", (A, B))
    for bad, why in (
        ("requests==2.32.3\n", "is not name==version with --hash"),
        ("requests>=2 --hash=sha256:" + A + "\n", "is not name==version"),
        (f'torch==2.9.0 ; sys_platform == "linux" --hash=sha256:{A}\n', "markers are not locked"),
        ("# nothing\n", "locks nothing"),
    ):
        with pytest.raises(ValueError, match=why):
            engine_lock.parse(bad, "locks/vllm.txt")


def test_the_venv_is_named_by_the_lock_and_the_profile():
    text = engine_lock.render(engine_lock.from_wheels(WHEELS))
    name = engine_lock.digest(PINS, "0.33.0", "0.5.6", text)
    assert len(name) == 12 and int(name, 16) >= 0
    assert engine_lock.digest(PINS, "0.33.0", "0.5.6", text) == name  # stable
    assert engine_lock.digest(PINS, "0.33.1", "0.5.6", text) != name  # emulated version
    other = engine_lock.render(engine_lock.from_wheels({**WHEELS, "idna-3.10-py3-none-any.whl": A}))
    assert engine_lock.digest(PINS, "0.33.0", "0.5.6", other) != name  # a dependency
    assert engine_lock.venv_path("/opt/kvceph/venv", name) == f"/opt/kvceph/venv-{name}"
    assert engine_lock.link_path("/opt/kvceph/venv", "vllm-engine-a.service") == (
        "/opt/kvceph/engines/vllm-engine-a"
    )


def test_the_prune_keeps_what_runs_and_the_newest_other_never_the_legacy_or_foreign():
    base = "/opt/kvceph/venv"
    old, older, oldest, now = (f"{base}-{c * 12}" for c in "abcd")
    venvs = {
        now: 400,
        old: 300,
        older: 200,
        oldest: 100,
        f"{base}-backup": 50,  # not a digest: the operator's
        base: 10,  # the venv before digests: never
    }
    mine = [now, old, older, oldest, f"{base}-backup", base]
    assert engine_lock.to_prune(base, venvs, [now], mine) == [oldest, older]
    # An engine still linked to the oldest (its host rolled back) keeps it.
    assert engine_lock.to_prune(base, venvs, [now, oldest], mine) == [older]
    assert engine_lock.to_prune(base, venvs, [now], mine, keep=0) == [oldest, older, old]
    assert engine_lock.to_prune(base, {now: 1}, [now], mine) == []
    # A digest-named directory without kvceph's marker or lock record: an operator's.
    assert engine_lock.to_prune(base, venvs, [now], [now, old, older]) == [older]


VA, VB, VC, VD = (f"/opt/kvceph/venv-{x * 12}" for x in "abcd")
LINK = "/opt/kvceph/engines/vllm"


def _host(runs, **venvs):
    """An ``EngineVenvs`` answer: the engines run ``runs``; each venv -> (mtime, marked, lock)."""
    fact = {"venvs": {}, "links": {LINK: runs}, "legacy": False, "marks": {}, "locks": {}}
    for path, (mtime, marked, lock) in venvs.items():
        fact["venvs"][path] = mtime
        if marked:
            fact["marks"][path] = 1 << 20
        if lock is not None:
            fact["locks"][path.rsplit("/", 1)[-1]] = lock
    return fact


def test_an_upgrade_keeps_the_venv_the_engines_ran_and_a_second_run_removes_nothing():
    """VA runs, VB was its rollback target; the new profile is VC. Before the install only what
    is older than VB goes (VD), after the roll VB too; once the engines run VC, VA stays."""
    fact = _host(VA, **{VA: (300, True, None), VB: (200, True, None), VD: (100, True, None)})
    before, after = engine_lock.prune_plan("/opt/kvceph/venv", fact, VC, [LINK])
    assert before.venvs == (VD,) and after.venvs == (VB,)
    fact = _host(VC, **{VC: (400, True, None), VA: (300, True, None)})
    assert engine_lock.prune_plan("/opt/kvceph/venv", fact, VC, [LINK]) == (
        engine_lock.Prune((), ()),
        engine_lock.Prune((), ()),
    )


def test_only_venvs_kvceph_marked_or_recorded_are_pruned():
    """E has neither kvceph's marker nor a lock record: an operator made it; it stays."""
    e = "/opt/kvceph/venv-eeeeeeeeeeee"
    fact = _host(VA, **{VA: (300, True, None), VB: (200, False, {}), e: (100, False, None)})
    before, after = engine_lock.prune_plan("/opt/kvceph/venv", fact, VC, [LINK])
    assert before.venvs == () and after.venvs == (VB,)
    assert engine_lock.owned_venvs(fact) == [VA, VB]


def test_wheels_stay_while_a_kept_venvs_lock_or_this_upload_names_them():
    lock = {"lmcache": "0.5.6", "kvceph-lab-engine": "0.1.0"}
    fact = _host(VA, **{VA: (300, True, lock), VB: (200, True, {"lmcache": "0.5.5"})})
    fact["wheels"] = {
        "lmcache-0.5.6-py3-none-any.whl": 10,  # A's (the rollback target after the roll)
        "lmcache-0.5.5-py3-none-any.whl": 10,  # B's: goes with VB after the roll
        "lmcache-0.5.4-py3-none-any.whl": 10,  # nobody's: goes before the install
        "kvceph_lab_engine-0.2.0-py3-none-any.whl": 10,  # this run's upload
        "notes.txt": 1,  # not a wheel
    }
    upload = ["kvceph_lab_engine-0.2.0-py3-none-any.whl"]
    before, after = engine_lock.prune_plan("/opt/kvceph/venv", fact, VC, [LINK], upload)
    assert before == engine_lock.Prune((), ("lmcache-0.5.4-py3-none-any.whl",))
    assert after == engine_lock.Prune((VB,), ("lmcache-0.5.5-py3-none-any.whl",))


def test_no_wheel_goes_where_a_kept_venv_has_no_lock_record():
    """A venv installed without a lock (kvceph_engine_lock False): its wheels are unknown."""
    fact = _host(VA, **{VA: (300, True, None)})
    fact["wheels"] = {"lmcache-0.5.4-py3-none-any.whl": 10}
    before, after = engine_lock.prune_plan("/opt/kvceph/venv", fact, VC, [LINK])
    assert before.wheels == () and after.wheels == ()


def test_a_group_with_different_packages_is_refused_in_one_line():
    same = {"lmcache": "0.5.6", "transformers": "4.57.1", "pip": "24.0"}
    hosts = {"gpu1": same, "gpu2": {**same, "pip": "25.1"}, "gpu3": {}}
    # pip comes with the venv; a host without the venv installs from the same lock.
    assert engine_lock.group_difference("Qwen/Qwen3-32B TP 2", hosts) is None
    hosts["gpu2"] = {**same, "transformers": "4.57.3"}
    line = engine_lock.group_difference("Qwen/Qwen3-32B TP 2", hosts)
    assert line == (
        "cache group Qwen/Qwen3-32B TP 2: hosts run different engine packages: transformers "
        "4.57.1 on gpu1 vs 4.57.3 on gpu2; fix: install every host from the profile's lock "
        "(kvceph_engine_lock), or remove what was installed by hand"
    )
    hosts["gpu2"] = {k: v for k, v in same.items() if k != "lmcache"}
    assert "lmcache 0.5.6 on gpu1 vs absent on gpu2" in engine_lock.group_difference("g", hosts)


def test_a_connector_the_group_does_not_load_is_not_compared():
    """A venv made while kvceph's connector was chosen keeps it; a host added after the switch
    back to LMCache's own connector lacks it (the CI's Pacific session: test_12, then test_14)."""
    same = {"lmcache": "0.5.6", "kvceph-lab-engine": "0.1.0"}
    hosts = {"gpu1": {**same, "kvceph-connector": "0.1.0"}, "gpu2": same}
    assert "kvceph-connector 0.1.0 on gpu1 vs absent on gpu2" in engine_lock.group_difference(
        "g", hosts
    )
    assert engine_lock.group_difference("g", hosts, ignore=("kvceph_connector",)) is None


def test_the_venvs_fact_reads_venvs_links_and_the_legacy_venv():
    fact = EngineVenvs()
    command = fact.command("/opt/kvceph/venv").get_raw_value()
    assert "for d in /opt/kvceph/venv-*/;" in command and "in /opt/kvceph/engines/*;" in command
    out = [
        "venv 1764800000 /opt/kvceph/venv-aaaaaaaaaaaa",
        "link /opt/kvceph/engines/vllm /opt/kvceph/venv-aaaaaaaaaaaa",
        "legacy yes",
    ]
    assert fact.process(out) == {
        "venvs": {"/opt/kvceph/venv-aaaaaaaaaaaa": 1764800000},
        "links": {"/opt/kvceph/engines/vllm": "/opt/kvceph/venv-aaaaaaaaaaaa"},
        "legacy": True,
        "marks": {},
        "locks": {},
        "wheels": {},
    }


def test_the_restart_switches_the_link_by_rename_and_only_then_restarts():
    venv = "/opt/kvceph/venv-aaaaaaaaaaaa"
    link = ("/opt/kvceph/engines/vllm", venv)
    cmd = str(drain.restart_command("vllm.service", 8000, link=link).get_raw_value())
    switch, restart = cmd.split("|| exit 1;")
    assert switch.startswith(f"ln -sfn {venv} /opt/kvceph/engines/vllm.kvceph-new && mv -Tf")
    assert "systemctl restart vllm.service" in restart
    plain = str(drain.restart_command("vllm.service", 8000).get_raw_value())
    assert "ln -sfn" not in plain and plain == restart.strip()


def test_hash_wheelhouse_is_the_files_sha256(tmp_path):
    (tmp_path / "x-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "notes.txt").write_text("not a wheel")
    assert engine_lock.hash_wheelhouse(tmp_path) == {
        "x-1.0-py3-none-any.whl": hashlib.sha256(b"wheel").hexdigest()
    }


def test_a_removed_engines_link_keeps_no_venv_from_the_prune():
    """test_10 removes vllm-2.service; its link still pointed at the first venv, so after two
    upgrades three venvs stayed (CI's Pacific session, test_14). Only listed engines count."""
    from pyinfra.context import ctx_host, ctx_state
    from pyinfra_testing.util import FakeState, create_host, get_command_string

    from deploys.operations import engine as engine_ops

    a, b, c = (f"/opt/kvceph/venv-{x * 12}" for x in "abc")
    fact = {
        "venvs": {a: 1, b: 2, c: 3},
        "links": {"/opt/kvceph/engines/vllm": c, "/opt/kvceph/engines/vllm-2": a},
        "legacy": False,
        "marks": {a: 1, b: 2, c: 3},
    }
    state = FakeState()
    host = create_host(state, facts={"engine.EngineVenvs": {"base=/opt/kvceph/venv": fact}})
    with ctx_state.use(state), ctx_host.use(host):
        commands = list(
            engine_ops.pruned_venvs._inner(
                base="/opt/kvceph/venv", venv=c, links=["/opt/kvceph/engines/vllm"], when="install"
            )
        )
    assert [get_command_string(x) for x in commands] == [
        f"rm -rf --one-file-system -- {a} /var/cache/kvceph/locks/venv-{'a' * 12}.txt"
    ]


def test_the_prune_after_the_roll_plans_from_the_host_as_the_run_found_it(monkeypatch):
    """test_14 on the Pacific lab: read after the roll, the links named the new venv, so the
    roll's prune kept the one before the rollback target (three venvs) and the next run's
    prune before the install removed it (a change on a converged host). Both prunes plan from
    the run's first ``EngineVenvs`` answer; a second run removes nothing."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_host, ctx_state
    from pyinfra_testing.util import get_command_string

    from deploys.facts import memo
    from deploys.facts.engine import EngineVenvs
    from deploys.operations import engine as engine_ops

    def answer(runs, *venvs):
        return {
            "venvs": {v: i for i, v in enumerate(venvs)},
            "links": {LINK: runs},
            "legacy": False,
            "marks": dict.fromkeys(venvs, 1),
            "locks": {},
            "wheels": {},
        }

    def deploy(answers: list, executed: list):
        """One run's two prunes; ``answers`` are the host's successive EngineVenvs reads, and
        ``executed`` how many operations ran a command before each prune."""
        inventory = Inventory((["gpu1"], {}))
        state, gpu1 = State(inventory, Config()), inventory.get_host("gpu1")
        monkeypatch.setattr(gpu1, "get_fact", lambda fact, **kw: answers.pop(0))
        out = []
        with ctx_state.use(state), ctx_host.use(gpu1):
            memo.read(gpu1, EngineVenvs, base="/opt/kvceph/venv")  # preflight's read
            for when, n in zip(("install", "roll"), executed, strict=True):
                monkeypatch.setattr(memo, "_commands_executed", lambda state, n=n: n)
                args = {"base": "/opt/kvceph/venv", "venv": VC, "links": [LINK], "when": when}
                out.append([get_command_string(c) for c in engine_ops.pruned_venvs._inner(**args)])
        return out

    # VB runs, VA was its rollback target; the roll to VC ran commands (the re-read sees it).
    found, rolled = answer(VB, VA, VB), answer(VC, VA, VB, VC)
    before, after = deploy([found, found, rolled], executed=[3, 9])
    assert before == [] and after == [
        f"rm -rf --one-file-system -- {VA} /var/cache/kvceph/locks/venv-{'a' * 12}.txt"
    ]
    # The next run finds VB and VC, the engines on VC: nothing goes.
    converged = answer(VC, VB, VC)
    assert deploy([converged, converged, converged], executed=[0, 0]) == [[], []]
