"""deploys/remote/model_mirror.py: manifest, the signed pull, checksums, atomic staging."""

import datetime
import hashlib
import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

import pytest

PATH = Path(__file__).resolve().parents[2] / "deploys" / "remote" / "model_mirror.py"
spec = importlib.util.spec_from_file_location("model_mirror", PATH)
mm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mm)

KEYS = {"access_key": "READER", "secret_key": "reader-secret", "region": "default"}
PREFIX = "models/Org/Tiny@" + "a" * 40 + "/"


def model_dir(tmp_path) -> Path:
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "qwen3"}')
    (d / "tokenizer.json").write_text('{"model": {}}')
    (d / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 4100)
    (d / ".cache").mkdir()
    (d / ".cache" / "lock").write_text("x")  # hidden: a hub download's leftovers, not the model
    return d


def test_manifest_lists_every_file_with_size_and_sha256(tmp_path):
    d = model_dir(tmp_path)
    manifest = mm.build_manifest(str(d))
    assert [f["path"] for f in manifest["files"]] == [
        "config.json",
        "sub/weights.bin",
        "tokenizer.json",
    ]
    weights = manifest["files"][1]
    assert weights["size"] == 256 * 4100
    assert weights["sha256"] == hashlib.sha256((d / "sub" / "weights.bin").read_bytes()).hexdigest()
    assert mm.parse_manifest(mm.manifest_text(manifest)) == manifest


def test_a_directory_without_config_json_is_no_model(tmp_path):
    (tmp_path / "x").write_text("y")
    with pytest.raises(mm.Failure, match="no config.json"):
        mm.build_manifest(str(tmp_path))


@pytest.mark.parametrize(
    "files,words",
    [
        ([{"path": "../etc/passwd", "size": 1, "sha256": "0" * 64}], "plain relative"),
        ([{"path": "/etc/passwd", "size": 1, "sha256": "0" * 64}], "plain relative"),
        ([{"path": "config.json", "size": 1, "sha256": "abc"}], "sha256"),
        ([{"path": "config.json", "size": "1", "sha256": "0" * 64}], "size"),
        ([{"path": "w.bin", "size": 1, "sha256": "0" * 64}], "no config.json"),
        ([], "file list"),
    ],
)
def test_an_untrustworthy_manifest_is_refused(files, words):
    with pytest.raises(mm.Failure, match=words):
        mm.parse_manifest(json.dumps({"version": 1, "files": files}))


class FakeMirror(BaseHTTPRequestHandler):
    """Path-style GETs; every request's SigV4 signature is checked with botocore's signer."""

    objects: dict[str, bytes] = {}
    seen: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        import botocore.auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        when = datetime.datetime.strptime(self.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
        request = AWSRequest(
            method="GET",
            url=f"https://{self.headers['Host']}{self.path}",
            headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
        )
        # UNSIGNED-PAYLOAD, as the helper sends it (botocore's own choice for S3 streaming).
        request.context["client_config"] = mock.Mock(s3={"payload_signing_enabled": False})
        with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
            botocore.auth.S3SigV4Auth(
                Credentials(KEYS["access_key"], KEYS["secret_key"]), "s3", KEYS["region"]
            ).add_auth(request)
        if self.headers["Authorization"] != request.headers["Authorization"]:
            self.send_response(403)
            self.end_headers()
            return
        from urllib.parse import unquote

        key = unquote(self.path)
        self.seen.append(key)
        body = self.objects.get(key)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")


@pytest.fixture
def mirror(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMirror)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    d = model_dir(tmp_path)
    manifest = mm.build_manifest(str(d))
    FakeMirror.objects = {
        f"/models-bucket/{PREFIX}{f['path']}": (d / f["path"]).read_bytes()
        for f in manifest["files"]
    }
    FakeMirror.objects[f"/models-bucket/{PREFIX}{mm.MANIFEST}"] = mm.manifest_text(
        manifest
    ).encode()
    FakeMirror.seen = []
    yield {**KEYS, "endpoint": f"http://127.0.0.1:{server.server_port}"}
    server.shutdown()


def test_pull_checks_every_file_and_renames_into_place(mirror, tmp_path, capsys):
    dest = tmp_path / "staged" / "Org" / "Tiny@rev"
    mm.pull(mirror, "models-bucket", PREFIX, str(dest), jobs=3)
    assert (dest / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 4100
    assert (dest / mm.MANIFEST).is_file()
    assert not Path(str(dest) + ".partial").exists()
    assert oct((dest / "config.json").stat().st_mode & 0o777) == "0o644"
    assert "pulled 3 files" in capsys.readouterr().out
    # A second pull finds the manifest in place and fetches nothing.
    FakeMirror.seen.clear()
    mm.pull(mirror, "models-bucket", PREFIX, str(dest), jobs=3)
    assert FakeMirror.seen == []
    assert "is staged" in capsys.readouterr().out


def test_a_damaged_object_never_reaches_the_served_path(mirror, tmp_path):
    FakeMirror.objects[f"/models-bucket/{PREFIX}sub/weights.bin"] += b"!"
    dest = tmp_path / "Tiny@rev"
    with pytest.raises(mm.Failure, match="sub/weights.bin: .* differ from the manifest"):
        mm.pull(mirror, "models-bucket", PREFIX, str(dest), jobs=2)
    assert not dest.exists()


def test_a_missing_prefix_and_a_wrong_key_are_one_line(mirror, tmp_path):
    with pytest.raises(mm.Failure, match=r"s3://models-bucket/models/Other@x/kvceph-manifest.json"):
        mm.pull(mirror, "models-bucket", "models/Other@x/", str(tmp_path / "d"), jobs=1)
    with pytest.raises(mm.Failure, match="HTTP 403"):
        mm.pull({**mirror, "secret_key": "wrong"}, "models-bucket", PREFIX, str(tmp_path / "d"), 1)


def test_main_reports_failures_in_one_line(tmp_path, capsys):
    assert mm.main(["manifest", str(tmp_path)]) == 1
    assert capsys.readouterr().err.count("\n") == 1
