"""Model source: the serve argument, the model flags and environment, and their checks."""

import pytest

from deploys import preflight, render
from deploys import settings as s
from deploys.settings import model_source as ms
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import SettingsError

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
REV = "0123456789abcdef0123456789abcdef01234567"
MIRROR = {"kvceph_model_source": "mirror", "kvceph_model_revision": REV}


def load(host="gpu1", groups=("gpu",), **data):
    return s.load({**BASE, **data}, host, groups)


def _serve(me):
    argv = render.exec_start(me)
    return argv[argv.index("serve") + 1 :]


def test_default_is_todays_hub_download_unpinned():
    me = load()
    assert me.engine.source == ms.ModelSource("hub", "Qwen/Qwen3-32B", None, None)
    args = _serve(me)
    assert args[0] == "Qwen/Qwen3-32B" and args[1] == "--host"
    for flag in ("--revision", "--tokenizer-revision", "--served-model-name"):
        assert flag not in args
    assert "HF_HUB_OFFLINE" not in dict(render.environment(me))


def test_hub_revision_pins_model_and_tokenizer():
    args = _serve(load(kvceph_model_revision=REV))
    assert args[:5] == ["Qwen/Qwen3-32B", "--revision", REV, "--tokenizer-revision", REV]


def test_mirror_serves_a_fixed_local_path_under_the_clients_name():
    me = load(**MIRROR)
    path = f"/var/lib/kvceph/models/Qwen/Qwen3-32B/{REV}"
    assert "@" not in path  # LMCache splits its keys on "@"
    assert me.engine.serve_model == path
    assert me.engine.source.mirror_prefix == f"models/Qwen/Qwen3-32B@{REV}/"
    assert _serve(me)[:3] == [path, "--served-model-name", "Qwen/Qwen3-32B"]
    assert dict(render.environment(me))["HF_HUB_OFFLINE"] == "1"
    # Known model: sized from the table, not from a directory a blank host does not have yet.
    assert me.lmcache.kv_bytes_per_token == 131_072


def test_path_source_serves_the_operators_directory():
    me = load(kvceph_model_source="path", kvceph_model_path="/mnt/models/qwen3/")
    assert _serve(me)[:3] == ["/mnt/models/qwen3", "--served-model-name", "Qwen/Qwen3-32B"]
    assert dict(render.environment(me))["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize(
    "data,key,words",
    [
        ({"kvceph_model_revision": "main"}, "kvceph_model_revision", "not a commit hash"),
        ({"kvceph_model_revision": REV[:12]}, "kvceph_model_revision", "not a commit hash"),
        ({"kvceph_model_source": "s3"}, "kvceph_model_source", "must be one of"),
        ({"kvceph_model_source": "mirror"}, "kvceph_model_revision", "required"),
        ({**MIRROR, "kvceph_model_path": "/x"}, "kvceph_model_path", "derived"),
        ({**MIRROR, "kvceph_model": "../etc"}, "kvceph_model", "is neither a model id"),
        ({**MIRROR, "kvceph_model_mirror_bucket": "Models"}, "kvceph_model_mirror_bucket", ""),
        ({"kvceph_model_source": "path"}, "kvceph_model_path", "absolute directory"),
        ({"kvceph_model_path": "/x"}, "kvceph_model_path", "only read with"),
        (
            {"kvceph_model_source": "path", "kvceph_model_path": "/m/../etc"},
            "kvceph_model_path",
            "absolute",
        ),
        (
            {"kvceph_model_source": "path", "kvceph_model_path": f"/m/Qwen3@{REV}"},
            "kvceph_model_path",
            "absolute",
        ),
        (
            {"kvceph_model_source": "path", "kvceph_model": "/m", "kvceph_model_path": "/m"},
            "kvceph_model",
            "client-facing name",
        ),
        (
            {"kvceph_model": "/srv/m", "kvceph_model_revision": REV},
            "kvceph_model_revision",
            "means nothing",
        ),
    ],
)
def test_bad_model_settings_are_one_line(data, key, words):
    with pytest.raises(SettingsError) as err:
        load(**data)
    message = str(err.value)
    assert message.startswith(f"gpu1: {key} = ") and "; fix: " in message
    assert words in message and "\n" not in message


def _group(gpu1: dict, gpu2: dict):
    return [
        load(host="admin", groups=("ceph_admin",)),
        load(host="gpu1", **gpu1),
        load(host="gpu2", **gpu2),
    ]


@pytest.mark.parametrize(
    "data",
    [{}, MIRROR, {"kvceph_model_source": "path", "kvceph_model_path": "/mnt/models/m"}],
    ids=["hub", "mirror", "path"],
)
def test_a_model_name_with_an_at_sign_is_refused_for_every_source(data):
    # LMCache joins an object key's fields with "@" and splits them again (CacheEngineKey)
    with pytest.raises(SettingsError) as e:
        load(kvceph_model="org/model@v2", **data)
    assert str(e.value) == (
        "gpu1: kvceph_model = 'org/model@v2': contains '@', which LMCache splits its object "
        "keys on; fix: drop the '@...' part (pin a version with kvceph_model_revision)"
    )


@pytest.mark.parametrize(
    "gpu2,key",
    [
        ({}, "kvceph_model_source"),
        ({**MIRROR, "kvceph_model_revision": "f" * 40}, "kvceph_model_revision"),
        ({**MIRROR, "kvceph_model_dir": "/srv/models"}, "kvceph_model_path"),
    ],
)
def test_cache_group_refuses_mixed_sources_revisions_and_paths(gpu2, key):
    with pytest.raises(SettingsError) as err:
        check_inventory(_group(MIRROR, gpu2))
    assert str(err.value).startswith(f"gpu2: {key} = ")
    assert "never reuse each other's cache" in str(err.value)


def test_cache_group_of_one_source_passes():
    groups = check_inventory(_group(MIRROR, MIRROR))
    assert [g.hosts for g in groups] == [("gpu1", "gpu2")]


def test_preflight_refuses_an_unpinned_hub_model_in_one_line():
    hosts = _group({}, {})
    groups = check_inventory(hosts)
    with pytest.raises(SettingsError) as err:
        preflight.check_revisions({h.host: h for h in hosts}, groups)
    assert str(err.value) == (
        "gpu1: kvceph_model_revision = None: the hub model Qwen/Qwen3-32B is not pinned: a "
        "replaced node would download the newest weights and write their KV under the object "
        "names its peers load as theirs; fix: set kvceph_model_revision to the commit you serve "
        "(40 hex digits, huggingface.co/Qwen/Qwen3-32B/commits/main), or serve a mirror or a "
        "directory"
    )
    for data in ({"kvceph_model_revision": REV}, MIRROR, {"kvceph_model": "/srv/m"}):
        hosts = _group(data, data)
        preflight.check_revisions({h.host: h for h in hosts}, check_inventory(hosts))
    lines = preflight.revision_lines({h.host: h for h in hosts}, check_inventory(hosts))
    assert lines == ["kvceph: cache group /srv/m TP=2: the directory /srv/m (keep it the same "
                     "on every host)"]  # fmt: skip


def test_preflight_refuses_a_path_host_without_config_json():
    path = {"kvceph_model_source": "path", "kvceph_model_path": "/mnt/m"}
    hosts = {"gpu1": load(**path), "gpu2": load(host="gpu2", **path)}
    seen = []

    def read(name, where):
        seen.append((name, where))
        return {"model_type": "qwen3"} if name == "gpu1" else None

    with pytest.raises(SettingsError) as err:
        preflight.check_model_directories(hosts, read)
    assert str(err.value).startswith("gpu2: kvceph_model_path = '/mnt/m': no readable config.json")
    assert seen == [("gpu1", "/mnt/m"), ("gpu2", "/mnt/m")]
    # A host outside the run is not judged; hub and mirror hosts are not read here.
    preflight.check_model_directories(hosts, lambda name, where: preflight.OUTSIDE_RUN)
    preflight.check_model_directories({"gpu1": load(**MIRROR)}, lambda *a: pytest.fail("read"))


def _creds(models=True, same=False):
    from deploys.settings.secrets import Secret, Secrets

    return Secrets(
        Secret("KVKEY"),
        Secret("kv-secret"),
        "test",
        models_access_key=Secret("KVKEY" if same else "MODELKEY") if models else None,
        models_secret_key=Secret("model-secret") if models else None,
    )


def test_preflight_mirror_checks_are_one_line_before_any_host(tmp_path):
    hosts = {"gpu1": load(**MIRROR), "gpu2": load(host="gpu2", **MIRROR)}
    asked = []

    def mirrored(bucket, prefix):
        asked.append((bucket, prefix))
        return False

    with pytest.raises(SettingsError) as err:
        preflight.check_mirror(hosts, _creds(), mirrored)
    assert str(err.value) == (
        f"gpu1: kvceph_model_revision = '{REV}': the mirror has no "
        f"s3://kvceph-models/models/Qwen/Qwen3-32B@{REV}/; fix: check kvceph_model and the "
        "revision, or set kvceph_model_mirror_from to the model directory on the controller "
        "(uploaded once)"
    )
    assert asked == [("kvceph-models", f"models/Qwen/Qwen3-32B@{REV}/")]  # once per model
    preflight.check_mirror(hosts, _creds(), lambda b, p: True)
    preflight.check_mirror(hosts, _creds(), lambda b, p: preflight.OUTSIDE_RUN)
    with pytest.raises(SettingsError) as caught:
        preflight.check_mirror(hosts, _creds(models=False), mirrored)
    assert str(caught.value).endswith(
        "fix: export KVCEPH_MODELS_ACCESS_KEY / KVCEPH_MODELS_SECRET_KEY or put them in "
        "secrets.env (0600; docs/security.md)"
    )
    with pytest.raises(SettingsError, match="the KV key would write the model mirror"):
        preflight.check_mirror(hosts, _creds(same=True), mirrored)
    # Uploaded from the controller: its directory must be a model.
    upload = {"gpu1": load(**MIRROR, kvceph_model_mirror_from=str(tmp_path))}
    with pytest.raises(SettingsError, match="kvceph_model_mirror_from = .*no config.json"):
        preflight.check_mirror(upload, _creds(), mirrored)
    (tmp_path / "config.json").write_text("{}")
    preflight.check_mirror(upload, _creds(), mirrored)
    # Hosts without the mirror source need no mirror key.
    preflight.check_mirror({"gpu1": load()}, _creds(models=False), mirrored)


def test_one_mirror_per_inventory():
    a = load(**MIRROR).engine.source
    b = load(**MIRROR, kvceph_model_mirror_bucket="other-models").engine.source
    assert ms.mirror_users([a, a]) == ("kvceph-models", "kvceph-models", "kvceph-models-reader")
    with pytest.raises(ValueError, match="^inventory: kvceph_model_mirror_bucket/_owner/_reader"):
        ms.mirror_users([a, b])


def test_the_policy_the_helper_writes_is_the_one_the_operation_expects():
    import importlib.util
    from pathlib import Path

    from deploys.operations import model

    path = Path(preflight.__file__).parent / "remote" / "s3admin.py"
    spec = importlib.util.spec_from_file_location("s3admin_for_policy", path)
    s3admin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(s3admin)
    assert s3admin.read_policy("b", "r") == model.read_policy("b", "r")
    statement = model.read_policy("b", "r")["Statement"]
    assert [st["Action"] for st in statement] == [["s3:GetObject", "s3:ListBucket"]]
