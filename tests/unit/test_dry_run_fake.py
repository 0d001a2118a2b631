"""The whole deploy, planned with ``--dry`` against pyinfra's ``@fake`` connector.

Two cluster states scripted in tests/inventories/fake_facts.py: a fresh one (everything is
planned) and an already-converged one (nothing is). pyinfra runs as operators run it, from
the repo root, one subprocess per scenario and output mode, shared through module fixtures.
No ``-y``: under ``-y`` pyinfra skips change detection.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "tests" / "inventories"
PYINFRA = Path(sys.executable).parent / "pyinfra"
# A candidate deploy file can be checked before it replaces deploy.py.
DEPLOY = os.environ.get("KVCEPH_DRY_RUN_DEPLOY", "deploy.py")
sys.path.insert(0, str(INVENTORIES))

import fake_facts  # noqa: E402

INFERENCE = {"@fake/gpu1", "@fake/gpu2", "@fake/gaudi1"}
ADMIN = {"@fake/ceph1"}
STAGES = (
    "Ceph pools",
    "RGW service",
    "S3 tier",
    "Engine software",
    "Inference config",
    "vLLM service",
    "Readiness check",
)
# Read-only operations: they decide or check, and never plan a change.
CHECKS = {
    "Ceph pools | Check the PG budget of the planned pools",
    "S3 tier | RGW answers at http://127.0.0.1:80",
    "vLLM service | systemd daemon-reload (stale)",
    "Readiness check | Engine answers on port 8000",
    "Engine software | LMCache compiled CUDA ops",
    "Readiness check | Engine on port 8000 has its remote (S3) tier",
    # Read when they execute: after every host's install, after the host's roll.
    "Engine software | Cache group: identical engine packages",
    # Nothing of kvceph's to remove on a fresh or a converged host.
    "vLLM service | Prune old engine venvs and wheels",
    "Engine software | Prune old engine venvs and wheels (before the install)",
}
# `_if=unit.did_change`: pyinfra lists any op with `_if` as a conditional change while
# planning; it runs only where the unit op changes the file.
UNIT = "vLLM service | Unit /etc/systemd/system/vllm.service"

FRESH_CHANGES = {
    "Ceph pools | Ceph pool default.rgw.buckets.data": ADMIN,
    "Ceph pools | Ceph pool default.rgw.buckets.index": ADMIN,
    "RGW service | Label ceph1 kvceph-rgw": ADMIN,
    "RGW service | Apply the rgw.standard spec (read back: exported, all daemons running)": ADMIN,
    "S3 tier | rgw_dns_name s3.kvlab (virtual-hosted buckets); a change restarts rgw.standard's "
    "daemons one at a time (each back first)": ADMIN,
    "S3 tier | Directory /usr/local/lib/kvceph": ADMIN,
    "S3 tier | S3 admin helper /usr/local/lib/kvceph/s3admin.py": ADMIN,
    "S3 tier | Private directory /etc/kvceph/admin": ADMIN,
    "S3 tier | S3 admin credentials /etc/kvceph/admin/s3-admin.ini": ADMIN,
    "S3 tier | RGW user kvceph-s3-admin (owns bucket lmcache)": ADMIN,
    "S3 tier | Mark s3-user kvceph-s3-admin as kvceph's": ADMIN,
    "S3 tier | S3 credentials of cache group gaudi /etc/kvceph/admin/s3-group-gaudi.ini": ADMIN,
    "S3 tier | RGW user lmcache-gaudi (cache group gaudi's engines)": ADMIN,
    "S3 tier | Mark s3-user lmcache-gaudi as kvceph's": ADMIN,
    "S3 tier | RGW user lmcache-gaudi creates no buckets (max_buckets -1)": ADMIN,
    "S3 tier | S3 credentials of cache group gpu /etc/kvceph/admin/s3-group-gpu.ini": ADMIN,
    "S3 tier | RGW user lmcache-gpu (cache group gpu's engines)": ADMIN,
    "S3 tier | Mark s3-user lmcache-gpu as kvceph's": ADMIN,
    "S3 tier | RGW user lmcache-gpu creates no buckets (max_buckets -1)": ADMIN,
    "S3 tier | User quota 4.0 GiB for kvceph-s3-admin (kvceph_s3_quota_max_size_gb)": ADMIN,
    "S3 tier | Bucket quota 4.0 GiB for kvceph-s3-admin (live stats)": ADMIN,
    "S3 tier | Bucket lmcache": ADMIN,
    "S3 tier | Mark bucket lmcache as kvceph's": ADMIN,
    "S3 tier | Policy of bucket lmcache: each cache group on its own names": ADMIN,
    "S3 tier | Lifecycle of bucket lmcache": ADMIN,
    "S3 tier | Cache trim unit /etc/systemd/system/kvceph-cache-trim.service (2 group(s), "
    "each 2.0 GiB)": ADMIN,
    "S3 tier | Cache trim timer /etc/systemd/system/kvceph-cache-trim.timer (every 5 min)": ADMIN,
    "S3 tier | kvceph-cache-trim.timer running and enabled": ADMIN,
    "Engine software | Service account vllm": INFERENCE,
    "Engine software | Service home /var/lib/vllm": INFERENCE,
    "Engine software | Venv parent": INFERENCE,
    "Engine software | Engine packages in /opt/kvceph/venv-<digest>": INFERENCE,
    "Inference config | Config directory /etc/kvceph": INFERENCE,
    "Inference config | LMCache config /etc/kvceph/lmcache.yaml": INFERENCE,
    "Inference config | AWS directory /var/lib/vllm/.aws": INFERENCE,
    "Inference config | AWS credentials /var/lib/vllm/.aws/credentials": INFERENCE,
    "Inference config | AWS config /var/lib/vllm/.aws/config": INFERENCE,
    "Inference config | /etc/hosts entries for lmcache.s3.kvlab (1)": INFERENCE,
    "vLLM service | Engine environment /etc/kvceph/vllm.env": INFERENCE,
    "vLLM service | Engine secrets /etc/kvceph/secrets.env": INFERENCE,
    "vLLM service | Engine gate directory /usr/local/lib/kvceph": INFERENCE,
    "vLLM service | Engine gate /usr/local/lib/kvceph/kvceph_engine_guard.py": INFERENCE,
    "vLLM service | Engine venv links": INFERENCE,
    "vLLM service | Venv link of vllm.service": INFERENCE,
    UNIT: INFERENCE,
    "vLLM service | Enable vllm.service": INFERENCE,
    "vLLM service | Rolling restart of vllm.service": INFERENCE,
}

# Commands a fresh host answers with nothing (the path does not exist), so they need no script:
# files.File / files.Directory / files.Sha256File, and pyinfra's temp-dir probe.
ABSENT_OK = re.compile(r"^(! \(test -e |test -e \S+ && \( sha256sum |if \[ -n \"\$TMPDIR\" \])")
_FAKE_CMD = re.compile(r"^ {4}\[pyinfra\.connectors\.fake\] \[fake\] simulating command on (\S+): ")
# A new log record, or -vvv's echo of a host's command/output ("[@fake/gpu1]   >>> ...").
_LOG_RECORD = re.compile(r"^( {4}\[[^\]]*\]|-->|\[@fake/[\w.-]+\]\s)")
# Programs that talk to a daemon or the network: kvceph runs each under `timeout`.
CLIENTS = {
    "ceph",
    "radosgw-admin",
    "systemctl",
    "python3",
    "pip",
    "curl",
    "/opt/kvceph/venv/bin/python",
}


def _pyinfra(scenario: str, *flags: str, rc: int = 0) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        **fake_facts.fake_env(),
        "KVCEPH_VLLM_API_KEY": fake_facts.FAKE_API_KEY,
        "KVCEPH_HF_TOKEN": fake_facts.FAKE_HF_TOKEN,
        "PYINFRA_FAKE_DELAY": "0",
        "PYINFRA_FAKE_DELAY_JITTER": "0",
    }
    cmd = [str(PYINFRA), *flags, f"tests/inventories/fake_{scenario}.py", DEPLOY]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == rc, f"{' '.join(cmd)}: rc {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc


def _plan(scenario: str) -> list[dict]:
    return json.loads(_pyinfra(scenario, "--dry", "--json").stdout)["plan"]


@pytest.fixture(scope="module")
def fresh_plan():
    return _plan("fresh")


@pytest.fixture(scope="module")
def converged_plan():
    return _plan("converged")


@pytest.fixture(scope="module")
def fresh_verbose():
    proc = _pyinfra("fresh", "--dry", "-vvv", "--debug", "--diff")
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def converged_verbose():
    proc = _pyinfra("converged", "--dry", "-vvv", "--debug", "--diff")
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def fresh_executed():
    """The fresh plan *executed* on the fake connector (nothing real is touched): the only way
    to see the operations' own commands. It ends with the readiness check failing, as the
    scripted engine never answers."""
    proc = _pyinfra("fresh", "-y", "-vvv", "--debug", rc=1)
    output = proc.stdout + proc.stderr
    assert "Operation error" in output and "not ready" in output.rsplit("Operation error", 1)[1]
    return output


def _changes(plan: list[dict], key: str = "hosts_with_change") -> dict[str, set[str]]:
    return {op["name"]: set(op[key]) for op in plan if op[key]}


def _commands(output: str) -> list[tuple[str, str]]:
    """(host, full command) of every command the fake connector answered (from --debug)."""
    found: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in output.splitlines():
        m = _FAKE_CMD.match(line)
        if m:
            current = [line[m.end() :]]
            found.append((m.group(1), current))
        elif _LOG_RECORD.match(line):
            current = None
        elif current is not None:
            current.append(line)  # a multi-line command (a python -c script)
    return [(h, "\n".join(lines)) for h, lines in found]


def _unscripted(output: str, layout: fake_facts.Layout) -> list[str]:
    groups = fake_facts.inventory(layout)
    keys = {h: list(d["fake_responses"]) for members in groups.values() for h, d in members}
    missing = []
    for host, cmd in _commands(output):
        if not any(k.search(cmd) if isinstance(k, re.Pattern) else k in cmd for k in keys[host]):
            missing.append(f"{host}: {cmd[:160]}")
    return missing


def test_converged_cluster_plans_no_change(converged_plan):
    assert _changes(converged_plan) == {}
    # No conditional (_if) operation either: "zero changes" means zero.
    assert _changes(converged_plan, "hosts_with_conditional_change") == {}


def _stage(name: str) -> str | None:
    stage = name.split(" | ", 1)[0] if " | " in name else None
    return stage if stage in STAGES else None


def test_fresh_cluster_plans_every_stage(fresh_plan):
    assert _changes(fresh_plan) == FRESH_CHANGES
    assert _changes(fresh_plan, "hosts_with_conditional_change") == {}
    quiet = {op["name"] for op in fresh_plan if not op["hosts_with_change"]}
    # Besides the checks, only an op outside the stages (an ordering barrier) may plan nothing.
    assert CHECKS <= quiet
    assert all(_stage(name) is None for name in quiet - CHECKS)


def test_out_of_band_drift_plans_a_restart_and_says_why():
    # Hand edits then hand restarts: both engines still carry the desired digest.
    proc = _pyinfra("drift", "--dry", "-v")
    output = proc.stdout + proc.stderr
    plan = json.loads(_pyinfra("drift", "--dry", "--json").stdout)["plan"]
    assert _changes(plan) == {
        "Inference config | LMCache config /etc/kvceph/lmcache.yaml": {"@fake/gaudi1"},
        "vLLM service | Engine environment /etc/kvceph/vllm.env": {"@fake/gpu2"},
        "vLLM service | Rolling restart of vllm.service": {"@fake/gaudi1", "@fake/gpu2"},
    }
    restarts = re.findall(r"\[(@fake/\w+)\]\s+vllm.service restarts: (.*?); running digest", output)
    assert sorted(restarts) == [
        ("@fake/gaudi1", "/etc/kvceph/lmcache.yaml differs from desired"),
        (
            "@fake/gpu2",
            "running env PYTHONHASHSEED differs from desired (value not shown); "
            "/etc/kvceph/vllm.env differs from desired",
        ),
    ]
    assert _secrets_in(output) == []


def test_a_new_key_scheme_rolls_its_group_on_its_own_seed_and_says_what_it_costs():
    # gpu1/gpu2 run vLLM 0.26 on the fleet's seed; the profile says 0.33: another key scheme.
    proc = _pyinfra("scheme", "--dry", "-v")
    output = proc.stdout + proc.stderr
    plan = json.loads(_pyinfra("scheme", "--dry", "--json").stdout)["plan"]
    gpus = {"@fake/gpu1", "@fake/gpu2"}
    # Each engine's env file and unit, then its restart in the roll: nothing stops the group.
    assert _changes(plan) == {
        "vLLM service | Engine environment /etc/kvceph/vllm.env": gpus,
        UNIT: gpus,
        "vLLM service | Rolling restart of vllm.service": gpus,
    }
    assert not [op for op in plan if "Stop" in op["name"]]
    assert (
        "kvceph: cache group Qwen/Qwen3-32B TP=2: key scheme vllm-0.33/lmcache-0.5.6: hash "
        "seed: its own seed (derived from the fleet's), not vllm-0.26/lmcache-0.5.6's: old "
        "and new object names cannot collide"
    ) in output
    # gaudi1 keeps its scheme and the fleet's seed: nothing changes there.
    assert (
        "kvceph: cache group Qwen/Qwen3-32B TP=1: key scheme vllm-0.26/lmcache-0.5.6: hash "
        "seed: the fleet's seed, as its engines run it"
    ) in output
    for name in sorted(gpus):
        assert re.search(
            rf"kvceph: {name} vllm.service: vLLM 0.26.0 -> 0.33.0, LMCache 0.5.6: the object "
            r"keys change \(.*\): the new engines hash with key scheme vllm-0.33/lmcache-0.5.6's "
            r"own seed, .* the new scheme starts with an empty tier .* age out through the "
            r"lifecycle rule \(7 days\)",
            output,
        ), output[-3000:]
        assert re.search(
            rf"\[{name}\]\s+vllm.service restarts: .*running env PYTHONHASHSEED differs from "
            r"desired \(value not shown\)",
            output,
        )
        assert (
            f"{name}: cache key setting kvceph_engine_profile (key scheme "
            "vllm-0.33/lmcache-0.5.6's own hash seed) changes (set) -> (set, differs)"
        ) in output
    assert _secrets_in(output) == []


def test_both_states_plan_the_same_operations(fresh_plan, converged_plan):
    # The operation list depends on settings only; state decides what each op does.
    assert [op["name"] for op in fresh_plan] == [op["name"] for op in converged_plan]
    assert {_stage(op["name"]) for op in fresh_plan} >= set(STAGES)


def test_fresh_plan_lists_stages_in_procedure_order(fresh_plan):
    order = [STAGES.index(_stage(op["name"])) for op in fresh_plan if _stage(op["name"])]
    assert order == sorted(order)


def _restart_before_s3_ready(plan: list[dict]) -> list[str]:
    """Ceph-admin operations that pyinfra would run after the first engine restart."""
    names = [op["name"] for op in plan]
    restart = names.index("vLLM service | Rolling restart of vllm.service")
    return [n for n in names[restart:] if _stage(n) in ("Ceph pools", "RGW service", "S3 tier")]


def test_s3_tier_is_ready_before_engines_restart(fresh_plan):
    # pyinfra runs one operation at a time across hosts, in the plan's order. Engines that
    # start before their RGW user and bucket exist get 403/404 and LMCache turns S3 off.
    assert _restart_before_s3_ready(fresh_plan) == []


def test_s3_tier_is_ready_before_engines_restart_with_several_rgw_hosts():
    plan = json.loads(_pyinfra("rgw_hosts", "--dry", "--json").stdout)["plan"]
    assert _restart_before_s3_ready(plan) == []


def test_fresh_plan_text_reads_by_stage(fresh_verbose):
    assert "Traceback" not in fresh_verbose
    table = fresh_verbose.split("--> Detected changes:", 1)[1]
    for name, hosts in FRESH_CHANGES.items():
        row = next(line for line in table.splitlines() if line.strip().startswith(name))
        assert f"{len(hosts)} (" in row, row
    for stage in STAGES:
        assert f"    {stage} | " in table


SECRETS = {
    "S3 secret key": fake_facts.FAKE_SECRET_KEY,
    "API key": fake_facts.FAKE_API_KEY,
    "HF token": fake_facts.FAKE_HF_TOKEN,
}


def _secrets_in(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def test_secret_never_in_output(fresh_verbose, converged_verbose, fresh_plan, converged_plan):
    # deploy.py --dry -vvv --debug --diff, and the JSON plan: no secret value anywhere.
    assert _secrets_in(fresh_verbose) == []
    assert _secrets_in(converged_verbose) == []
    assert _secrets_in(json.dumps(fresh_plan) + json.dumps(converged_plan)) == []


def test_converged_commands_are_all_scripted(converged_verbose):
    # An unmatched command answers "" (success): a typo in a key would read as "absent".
    assert _unscripted(converged_verbose, fake_facts.Layout("fake_converged", converged=True)) == []


def test_fresh_commands_unscripted_only_for_absent_paths(fresh_verbose):
    missing = _unscripted(fresh_verbose, fake_facts.Layout("fake_fresh", converged=False))
    assert missing, "expected absent files to go unscripted"
    assert [m for m in missing if not ABSENT_OK.match(m.split(": ", 1)[1])] == []


def test_scripted_lifecycle_reads_back_as_kvceph_rules():
    # The converged lc dump must translate to exactly the rules the deploy wants.
    from deploys.facts.rgw import s3_rule

    me = fake_facts.Layout("fake_converged", converged=True).host_settings("@fake/ceph1")
    rules = fake_facts.lifecycle_rules(me)
    assert [s3_rule(fake_facts._lc_rule(r)) for r in rules] == rules


def test_executed_commands_never_carry_the_keys(fresh_executed):
    commands = [cmd for _, cmd in _commands(fresh_executed)]
    assert any("create-user" in c for c in commands)  # the ops did run
    assert _secrets_in(fresh_executed) == []
    # Keys travel in files (s3-admin.ini, ~/.aws/credentials, secrets.env), never in argv.
    assert [c for c in commands if fake_facts.FAKE_ACCESS_KEY in c] == []


@pytest.fixture(scope="module")
def converged_executed():
    """The converged cluster executed (-y): nothing changes, so every command is a fact read."""
    proc = _pyinfra("converged", "-y", "-vvv", "--debug")
    return proc.stdout + proc.stderr


def test_converged_run_reads_each_fact_once_per_host(converged_executed):
    # No fact command needs repeating (deploys/facts/memo.py). Before the memo, ceph1 ran 39
    # commands (``osd pool ls`` 5 times, ``versions`` 3), each engine host its unit state twice.
    commands = _commands(converged_executed)
    repeated = [f"{h}: {c[:120]}" for (h, c), n in Counter(commands).items() if n > 1]
    assert commands and repeated == []


def _unbounded(output: str) -> set[str]:
    return {
        cmd.splitlines()[0]
        for _, cmd in _commands(output)
        if cmd.split() and cmd.split()[0] in CLIENTS
    }


def test_daemon_commands_are_all_bounded(fresh_executed):
    assert _unbounded(fresh_executed) == set()


def test_restart_digest_does_not_depend_on_the_process(fresh_verbose):
    # The converged scenario computes the digest in pyinfra's own process; this recomputes it
    # here (another interpreter, another hash seed), so set/dict order cannot leak into it.
    from deploys import render
    from deploys.settings import secrets

    creds = secrets.load(environ=fake_facts.fake_env())
    layout = fake_facts.Layout("fake_fresh", converged=False)
    for host in sorted(INFERENCE):
        me = layout.host_settings(host)
        digest = render.digest(me, creds.engine(me.engine.cache_group))
        pattern = rf"\[{re.escape(host)}\]\s+vllm.service restarts: .*desired {digest[:12]}$"
        assert re.search(pattern, fresh_verbose, re.M), host


# --- kvceph's connector on the NVIDIA hosts (gaudi1 keeps the stock one) --------------------------

GPUS = {"@fake/gpu1", "@fake/gpu2"}


def _connector_ops() -> dict[str, set[str]]:
    from deploys.tier import connector_package

    wheel = connector_package.build()
    return {
        "Engine software | kvceph connector directory": GPUS,
        f"Engine software | kvceph connector wheel {wheel.filename}": GPUS,
        f"Engine software | kvceph connector {wheel.version} in /opt/kvceph/venv-<digest>": GPUS,
    }


@pytest.fixture(scope="module")
def connector_fresh():
    proc = _pyinfra("connector_fresh", "--dry", "--json")
    return json.loads(proc.stdout)["plan"], proc.stderr


def test_connector_fresh_plans_the_wheel_and_its_install(connector_fresh):
    plan, _ = connector_fresh
    assert _changes(plan) == {**FRESH_CHANGES, **_connector_ops()}
    names = [op["name"] for op in plan]
    # After the engine packages (the venv exists), before the config that loads it.
    assert (
        names.index("Engine software | Engine packages in /opt/kvceph/venv-<digest>")
        < min(names.index(n) for n in _connector_ops())
        < names.index("Inference config | LMCache config /etc/kvceph/lmcache.yaml")
    )


def test_connector_plan_says_which_crossover(connector_fresh):
    _, log = connector_fresh
    line = next(x for x in log.splitlines() if "kvceph: crossover of cache group" in x)
    assert "0 tokens (not measured yet: 0 = never skip until verify.py measures" in line
    assert "kvceph.min_hit_tokens on @fake/gpu1, @fake/gpu2" in line


def test_connector_converged_plans_no_change_and_reads_once():
    """Second run: the same wheel bytes, the same content hash in the venv: nothing to do."""
    plan = json.loads(_pyinfra("connector_converged", "--dry", "--json").stdout)["plan"]
    assert _changes(plan) == {}
    assert _changes(plan, "hosts_with_conditional_change") == {}
    output = _pyinfra("connector_converged", "-y", "-vvv", "--debug")
    text = output.stdout + output.stderr
    commands = _commands(text)
    assert commands and [c for c, n in Counter(commands).items() if n > 1] == []
    assert _unscripted(text, fake_facts.Layout("fake_connector_converged", converged=True,
                       kvceph_connector=tuple(sorted(GPUS)))) == []  # fmt: skip
