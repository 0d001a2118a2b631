"""deploys/remote/s3admin.py: argument handling, config file, one-line errors (offline)."""

import importlib.util
import json
import socket
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "deploys" / "remote" / "s3admin.py"
spec = importlib.util.spec_from_file_location("s3admin", PATH)
s3admin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s3admin)


def write_config(tmp_path, endpoint="http://127.0.0.1:80", **over):
    values = {"endpoint": endpoint, "region": "default", "access_key": "AK", "secret_key": "SK"}
    values.update(over)
    text = "[s3]\n" + "".join(f"{k} = {v}\n" for k, v in values.items() if v is not None)
    path = tmp_path / "s3-admin.ini"
    path.write_text(text)
    return str(path)


def test_parse_subcommands():
    args = s3admin.parse_args(["--config", "c.ini", "create-bucket", "lmcache"])
    assert (args.config, args.command, args.bucket) == ("c.ini", "create-bucket", "lmcache")
    args = s3admin.parse_args(["--config", "c", "put-lifecycle", "b", "--rules-json", "[]"])
    assert (args.command, args.bucket, args.rules_json) == ("put-lifecycle", "b", "[]")
    args = s3admin.parse_args(["--config", "c", "create-user", "u", "--display-name", "U U"])
    assert (args.command, args.uid, args.display_name) == ("create-user", "u", "U U")


@pytest.mark.parametrize(
    "argv",
    [
        ["create-bucket", "b"],  # no --config
        ["--config", "c"],  # no subcommand
        ["--config", "c", "put-lifecycle", "b"],  # no --rules-json
        ["--config", "c", "create-user", "u"],  # no --display-name
        ["--config", "c", "create-bucket", "b", "--access-key", "AK"],  # keys never as args
    ],
)
def test_usage_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        s3admin.parse_args(argv)
    assert exc.value.code == 2


def test_config_loaded(tmp_path):
    config = s3admin.load_config(write_config(tmp_path))
    assert config == {
        "endpoint": "http://127.0.0.1:80",
        "region": "default",
        "access_key": "AK",
        "secret_key": "SK",
    }


def test_config_errors_are_one_line(tmp_path, capsys):
    assert s3admin.main(["--config", str(tmp_path / "nope.ini"), "create-bucket", "b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("S3 tier: cannot read ") and err.count("\n") == 1
    path = write_config(tmp_path, secret_key=None)
    assert s3admin.main(["--config", path, "create-bucket", "b"]) == 1
    assert "lacks secret_key in [s3]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "rules, message",
    [
        ("{", "not valid JSON"),
        ("[]", "non-empty JSON list"),
        ('[{"Status": "Enabled"}]', "non-empty ID"),
        ('[{"ID": "a", "Status": "On"}]', "Status must be Enabled or Disabled"),
        ('[{"ID": "a", "Status": "Enabled"}, {"ID": "a", "Status": "Enabled"}]', "repeats"),
    ],
)
def test_rules_json_validated_before_any_request(tmp_path, capsys, rules, message):
    path = write_config(tmp_path)
    assert s3admin.main(["--config", path, "put-lifecycle", "b", "--rules-json", rules]) == 1
    assert message in capsys.readouterr().err


def test_unreachable_rgw_is_one_line_naming_the_endpoint(tmp_path, capsys):
    pytest.importorskip("boto3")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    path = write_config(tmp_path, endpoint=endpoint)
    assert s3admin.main(["--config", path, "create-bucket", "b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"S3 tier: cannot reach RGW at {endpoint}: ")
    assert err.count("\n") == 1 and "SK" not in err


def test_user_document_matches_metadata_get_shape():
    doc = s3admin.user_document("lmcache", "LMCache", "AK", "SK")
    assert doc["key"] == "user:lmcache"
    assert doc["data"]["keys"] == [{"user": "lmcache", "access_key": "AK", "secret_key": "SK"}]
    assert json.loads(json.dumps(doc)) == doc


# --- trim: a full cache keeps taking the newest prefixes (issue 52 item 3) --------------------

MIB = 2**20


def _obj(key, day, owner="lmcache-gpu", size=MIB):
    return {"Key": key, "Size": size, "LastModified": f"2026-12-{day:02d}T00:00:00Z",
            "Owner": {"ID": owner}}  # fmt: skip


def test_trim_deletes_nothing_below_the_high_water_mark():
    objects = [_obj(f"p/{i}", i + 1) for i in range(9)]
    assert s3admin.trim_plan(objects, 10 * MIB, "lmcache-gpu") == ([], 9 * MIB)


def test_trim_deletes_the_oldest_down_to_the_low_water_mark_and_only_its_groups():
    objects = [_obj(f"p/{i}", 20 - i) for i in range(10)]  # p/9 is the oldest
    objects.append(_obj("p/foreign", 1, owner="someone-else", size=50 * MIB))
    doomed, used = s3admin.trim_plan(objects, 10 * MIB, "lmcache-gpu")
    assert used == 10 * MIB  # the other user's object is not counted
    assert doomed == ["p/9", "p/8"]  # 10 -> 8 MiB: the two oldest
    assert "p/foreign" not in doomed


def test_trim_command_lists_every_page_and_deletes_in_one_batch(tmp_path, monkeypatch, capsys):
    pages = [
        {"Contents": [_obj("p/a", 1), _obj("p/b", 2)], "IsTruncated": True,
         "NextContinuationToken": "t"},
        {"Contents": [_obj("p/c", 3)], "IsTruncated": False},
    ]  # fmt: skip
    calls = []

    class Client:
        def list_objects_v2(self, **kw):
            calls.append(("list", kw))
            return pages[1 if kw.get("ContinuationToken") else 0]

        def delete_objects(self, **kw):
            calls.append(("delete", kw))
            return {}

    monkeypatch.setattr(s3admin, "s3_client", lambda config: Client())
    synced = []
    monkeypatch.setattr(s3admin, "radosgw_admin", lambda args: synced.append(args) or (0, "", ""))
    argv = ["--config", write_config(tmp_path), "trim", "lmcache", "--prefix", "p/",
            "--owner", "lmcache-gpu", "--share-bytes", str(3 * MIB),
            "--sync-uid", "adm"]  # fmt: skip
    assert s3admin.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"prefix": "p/", "used": 3 * MIB, "share": 3 * MIB, "deleted": 1,
                   "would_delete": 0, "freed": MIB, "rate": None}  # fmt: skip
    assert [c[0] for c in calls] == ["list", "list", "delete"]
    assert calls[0][1]["FetchOwner"] and calls[0][1]["Prefix"] == "p/"
    assert calls[2][1]["Delete"]["Objects"] == [{"Key": "p/a"}]
    assert synced == [["user", "stats", "--uid=adm", "--sync-stats"]]
    calls.clear()
    assert s3admin.main([*argv, "--dry"]) == 0
    assert json.loads(capsys.readouterr().out)["would_delete"] == 1
    assert [c[0] for c in calls] == ["list", "list"] and len(synced) == 1


def test_trim_keeps_the_fill_rate_of_each_group(tmp_path):
    state = str(tmp_path / "cache-trim.json")
    assert s3admin.fill_rate(None, 5, 100.0) is None
    s3admin.save_state(state, "p/", {"time": 100.0, "left": 8 * MIB, "used": 10 * MIB})
    s3admin.save_state(state, "q/", {"time": 100.0, "left": 1, "used": 1})
    before = s3admin.load_state(state, "p/")
    assert s3admin.fill_rate(before, 9 * MIB, 200.0) == MIB / 100  # 1 MiB in 100 s
    assert s3admin.fill_rate(before, 7 * MIB, 200.0) is None  # expired by the lifecycle
    assert s3admin.load_state(state, "q/")["left"] == 1
    assert s3admin.load_state(str(tmp_path / "none.json"), "p/") is None
