"""The model stages planned against fake facts: what a blank host and a blank mirror get, what a
converged one does not, and that no key is in any operation's printable arguments."""

from __future__ import annotations

from types import SimpleNamespace

from test_stages_plan import lab_host, names, plan  # noqa: F401 - the fixture

from deploys import settings as s
from deploys.settings.secrets import Secret, Secrets
from deploys.stages import model_mirror, model_weights

REV = "0123456789abcdef0123456789abcdef01234567"
MIRROR = {"kvceph_model_source": "mirror", "kvceph_model_revision": REV}
CREDS = Secrets(
    Secret("AKIAKV"),
    Secret("kv-secret"),
    "test",
    models_access_key=Secret("AKIAMODELS"),
    models_secret_key=Secret("models-secret-value"),
)


def _printable(calls):
    return repr([kwargs for _, kwargs in calls])


def test_a_blank_host_pulls_the_mirrored_model_with_the_read_only_key(plan):  # noqa: F811
    me = lab_host(**MIRROR)
    calls = plan(model_weights, me, {}, SimpleNamespace(credentials=CREDS))
    assert names(calls) == [
        "files.directory",
        "files.atomic_file",
        "files.private_file",
        "model.staged",
    ]
    key = dict(calls)["files.private_file"]
    assert (key["path"], key["user"], key["mode"]) == ("/etc/kvceph/models-s3.ini", "root", "0600")
    assert "models-secret-value" in key["content"].reveal()
    pull = dict(calls)["model.staged"]
    assert pull["path"] == f"/var/lib/kvceph/models/Qwen/Qwen3-32B/{REV}"
    assert pull["prefix"] == f"models/Qwen/Qwen3-32B@{REV}/"
    assert "models-secret-value" not in _printable(calls)


def test_hub_and_path_hosts_pull_nothing(plan):  # noqa: F811
    assert plan(model_weights, lab_host(), {}, SimpleNamespace(credentials=CREDS)) == []


def _checked(me, admin):
    return SimpleNamespace(credentials=CREDS, hosts={"gpu1": me, "admin": admin})


def test_the_mirror_is_made_once_and_a_model_uploaded_only_while_missing(plan, tmp_path):  # noqa: F811
    me = lab_host(**MIRROR, kvceph_model_mirror_from=str(tmp_path))
    admin = s.load({"kvceph_s3_endpoint_ip": "10.0.0.5"}, "admin", ("ceph_admin",))
    blank = plan(model_mirror, admin, {"MirroredModel": False}, _checked(me, admin))
    assert names(blank) == [
        "files.atomic_file",
        "model.mirror_owner",
        "files.private_file",
        "s3.user",
        "s3.bucket",
        "model.mirror_read_policy",
        "files.sync",
        "model.mirrored",
    ]
    by_name = dict(blank)
    assert by_name["s3.user"]["uid"] == "kvceph-models-reader"
    assert by_name["s3.bucket"]["owner"] == "kvceph-models"
    assert by_name["files.sync"]["src"] == str(tmp_path)
    assert "models-secret-value" not in _printable(blank)
    mirrored = plan(model_mirror, admin, {"MirroredModel": True}, _checked(me, admin))
    assert "files.sync" not in names(mirrored)
    # No mirrored engine: no mirror users or bucket at all.
    hub = lab_host()
    assert plan(model_mirror, admin, {}, _checked(hub, admin)) == []
