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
