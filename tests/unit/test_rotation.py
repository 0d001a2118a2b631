"""S3 key rotation (rotate.py): options, the engine check, the notice, s3admin add-key."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from plan_secrets import plan_secrets

from deploys.operations import s3, s3_rotation
from deploys.preflight import PreflightError
from deploys.stages import rotation

NEW = plan_secrets("NEWACCESS", "new-secret")
# One cache group's view: the keys its engines and its RGW user hold.
NEW_GPU = NEW.engine("gpu")
PATH = Path(__file__).resolve().parents[2] / "deploys" / "remote" / "s3admin.py"
spec = importlib.util.spec_from_file_location("s3admin_rotation", PATH)
s3admin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s3admin)


def test_options_add_needs_no_old_key():
    assert rotation.options({"kvceph_rotation": "add"}, NEW) == ("add", None)


def test_options_retire_names_the_old_access_key():
    data = {"kvceph_rotation": "retire", "kvceph_retire_access_key": "OLDACCESS"}
    assert rotation.options(data, NEW) == ("retire", "OLDACCESS")


@pytest.mark.parametrize(
    "data, message",
    [
        ({}, "kvceph_rotation = None: must be one of add, retire"),
        ({"kvceph_rotation": "rotate"}, "must be one of add, retire"),
        ({"kvceph_rotation": "retire"}, "kvceph_retire_access_key is unset"),
        (
            {"kvceph_rotation": "retire", "kvceph_retire_access_key": "AK SECRET"},
            "not an access key",
        ),
        (
            {"kvceph_rotation": "retire", "kvceph_retire_access_key": "NEWACCESS"},
            "names the configured access key",
        ),
    ],
)
def test_options_refused_with_one_line(data, message):
    with pytest.raises(PreflightError) as exc:
        rotation.options(data, NEW)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert "new-secret" not in str(exc.value)


CRED = "/var/lib/vllm/.aws/credentials"


def drift(**over):
    state = {
        "active": "active",
        "main_pid": 42,
        "digest": "d" * 64,
        "sha256": {CRED: "c" * 64},
        "newer": [],
    }
    state.update(over)
    return state


@pytest.mark.parametrize(
    "state, reason",
    [
        (drift(), None),
        (drift(digest="0" * 64), "engine started before the new keys were deployed"),
        (drift(digest=None), "engine started before the new keys were deployed"),
        (drift(active="failed", main_pid=0), "engine failed"),
        (drift(sha256={}), f"{CRED} does not hold the configured keys"),
        (drift(newer=[CRED]), f"{CRED} changed after the engine started"),
    ],
)
def test_engine_reason(state, reason):
    assert rotation.engine_reason(state, "d" * 64, CRED, "c" * 64) == reason


def user(*keys):
    return {"user_id": "lmcache", "keys": [{"access_key": a, "secret_sha256": s} for a, s in keys]}


def test_user_with_the_configured_key_among_others_is_accepted_and_reported():
    current = user(("OLDACCESS", "0" * 64), ("NEWACCESS", s3.secret_sha256("new-secret")))
    assert s3.user_refusal(current, "lmcache", NEW_GPU.access_key, NEW_GPU.secret_key) is None
    notice = s3.other_keys_notice(current, "lmcache", NEW_GPU.access_key)
    assert "RGW user lmcache also holds key(s) OLDACCESS" in notice
    assert "kvceph_retire_access_key=OLDACCESS" in notice and "NEWACCESS" not in notice
    assert s3.other_keys_notice(user(("NEWACCESS", "x")), "lmcache", NEW_GPU.access_key) is None


def test_user_without_the_configured_key_is_still_refused():
    current = user(("OLDACCESS", "0" * 64))
    assert "does not hold the configured access key" in s3.user_refusal(
        current, "lmcache", NEW_GPU.access_key, NEW_GPU.secret_key
    )


def test_retire_refusal_order():
    both = user(("OLDACCESS", "0" * 64), ("NEWACCESS", s3.secret_sha256("new-secret")))
    args = ("lmcache", "OLDACCESS", NEW_GPU.access_key, NEW_GPU.secret_key)
    assert s3_rotation.retire_refusal(both, *args) is None
    pending = s3_rotation.retire_refusal(both, *args, ["gpu2 (engine failed)"])
    assert "engines not yet on the configured key: gpu2 (engine failed)" in pending
    # Already retired: idempotent, whatever the engines do.
    gone = user(("NEWACCESS", s3.secret_sha256("new-secret")))
    assert s3_rotation.retire_refusal(gone, *args, ["gpu2 (engine failed)"]) is None


class FakeRadosgw:
    """radosgw-admin as s3admin.py calls it: a user record, an access-key index, stdin."""

    def __init__(self, keys):
        self.record = {"key": "user:lmcache", "ver": {"tag": "t", "ver": 1}, "data": {"keys": keys}}
        self.calls = []

    def __call__(self, args, stdin=None):
        self.calls.append((args, stdin))
        if args[:2] == ["metadata", "get"]:
            if args[2] != "user:lmcache":
                return 2, "", "ERROR: can't get key: (2) No such file or directory\n"
            return 0, json.dumps(self.record), ""
        if args[:2] == ["user", "info"]:
            return 13, "", "could not fetch user info: no user info saved\n"
        if args[:2] == ["metadata", "put"]:
            self.record = json.loads(stdin)
            return 0, "", ""
        raise AssertionError(args)


CONFIG = {"endpoint": "http://e", "region": "default", "access_key": "NEW", "secret_key": "s2"}


def test_add_key_appends_through_stdin_keeping_the_old_key(monkeypatch, capsys):
    fake = FakeRadosgw([{"user": "lmcache", "access_key": "OLD", "secret_key": "s1"}])
    monkeypatch.setattr(s3admin, "radosgw_admin", fake)
    s3admin.add_key(CONFIG, "lmcache")
    assert [k["access_key"] for k in fake.record["data"]["keys"]] == ["OLD", "NEW"]
    assert all("s2" not in " ".join(args) for args, _ in fake.calls), "secret in argv"
    assert "added the access key to RGW user lmcache (2 keys)" in capsys.readouterr().out
    fake.calls.clear()
    s3admin.add_key(CONFIG, "lmcache")  # again: nothing written
    assert [a[:2] for a, _ in fake.calls] == [["metadata", "get"]]


def test_add_key_refuses_a_replacement_and_a_missing_user(monkeypatch):
    fake = FakeRadosgw([{"user": "lmcache", "access_key": "NEW", "secret_key": "other"}])
    monkeypatch.setattr(s3admin, "radosgw_admin", fake)
    with pytest.raises(s3admin.Failure, match="different secret key"):
        s3admin.add_key(CONFIG, "lmcache")
    with pytest.raises(s3admin.Failure, match="RGW user nobody does not exist"):
        s3admin.add_key(CONFIG, "nobody")
    assert not any(a[:2] == ["metadata", "put"] for a, _ in fake.calls)


def test_add_key_parses():
    args = s3admin.parse_args(["--config", "c.ini", "add-key", "lmcache"])
    assert (args.command, args.uid) == ("add-key", "lmcache")


REPO = Path(__file__).resolve().parents[2]


def fake_rotate(*data: str) -> tuple[int, str]:
    """rotate.py planned (--dry, --json) on the @fake converged cluster."""
    import os
    import subprocess
    import sys

    sys.path.insert(0, str(REPO / "tests" / "inventories"))
    import fake_facts

    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "pyinfra"),
            "--dry",
            "--json",
            *(a for d in data for a in ("--data", d)),
            "tests/inventories/fake_converged.py",
            "rotate.py",
        ],
        cwd=REPO,
        env={
            **os.environ,
            **fake_facts.fake_env(),
            "PYINFRA_FAKE_DELAY": "0",
            "PYINFRA_FAKE_DELAY_JITTER": "0",
            "PYINFRA_PROGRESS": "off",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr


def planned(output: str) -> list:
    results = json.loads(output[output.index("{") :].split("\n--> ")[0])
    return [
        (op["name"], h)
        for op in results.get("plan", [])
        for h in op["hosts_with_change"] + op["hosts_with_conditional_change"]
    ]


@pytest.mark.parametrize(
    "data",
    [
        ("kvceph_rotation=add",),
        # The fake user holds only the configured key: the old one is already gone, and every
        # fake engine runs the configured digest, so the engine check passes.
        ("kvceph_rotation=retire", "kvceph_retire_access_key=OLDACCESS"),
    ],
)
def test_rotate_py_plans_nothing_on_a_converged_cluster(data):
    rc, out = fake_rotate(*data)
    assert rc == 0, out[-3000:]
    assert planned(out) == []


def test_rotate_py_refuses_bad_options_before_any_host():
    rc, out = fake_rotate("kvceph_rotation=retire")
    assert rc != 0
    assert "kvceph_retire_access_key is unset" in out
    assert "Starting operation" not in out


def test_engines_on_old_key_names_each_host_not_yet_rolled():
    from types import SimpleNamespace

    from pyinfra.api.exceptions import ConnectError

    from deploys import render, settings
    from deploys.operations.files import sha256_text

    data = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
    hosts = {
        name: settings.load(data, name, groups)
        for name, groups in (("ceph1", ["ceph_admin"]), ("gpu1", ["gpu"]), ("gpu2", ["gpu"]))
    }
    hosts["gpu3"] = settings.load(data, "gpu3", ["gpu"])
    checked = SimpleNamespace(hosts=hosts, credentials=NEW)
    gpu1 = hosts["gpu1"]
    path = f"{render.aws_dir(gpu1)}/credentials"
    rolled = drift(
        digest=render.digest(gpu1, NEW.engine(gpu1.engine.cache_group)),
        sha256={
            path: sha256_text(render.aws_credentials(gpu1, NEW.engine(gpu1.engine.cache_group)))
        },
    )
    facts = {"gpu1": rolled, "gpu2": drift(digest="0" * 64)}

    class Host:
        def __init__(self, name):
            self.name = name

        def get_fact(self, cls, **kwargs):
            assert kwargs == {"unit": "vllm.service", "files": (path,)}
            if self.name == "gpu3":
                raise ConnectError("Could not connect")
            return facts[self.name]

    inventory = SimpleNamespace(get_host=Host)
    assert rotation.engines_on_old_key(checked, inventory) == [
        "gpu2 (engine started before the new keys were deployed)",
        "gpu3 (cannot read its engine: Could not connect)",
    ]
