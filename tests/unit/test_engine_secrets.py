"""The engine's secrets (API key, HF token): one mechanism with the S3 keys, never in
group_data, extra_env, argv or output; a root-only file systemd reads; part of the digest."""

import pytest

from deploys import paths, render
from deploys import settings as s
from deploys.settings import secret_names, secrets
from deploys.settings.reader import SettingsError
from deploys.settings.secrets import S3Credentials, Secret

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
S3 = {"KVCEPH_S3_ACCESS_KEY": "AK1", "KVCEPH_S3_SECRET_KEY": "SK1"}
API_KEY, HF_TOKEN = "sk-kvceph-test-apikey-0001", "hf_testTOKEN0002"


def creds(**optional):
    return S3Credentials(Secret("AK1"), Secret("SK1"), "test", **optional)


def load(groups=("gpu",), **data):
    return s.load({**BASE, **data}, "gpu1", groups)


# --- loading --------------------------------------------------------------------------------


def test_optional_secrets_come_from_the_environment_and_print_masked():
    got = secrets.load({**S3, "KVCEPH_VLLM_API_KEY": API_KEY, "KVCEPH_HF_TOKEN": HF_TOKEN})
    assert (got.vllm_api_key.reveal(), got.hf_token.reveal()) == (API_KEY, HF_TOKEN)
    for shown in (repr(got), str(got), f"{got.vllm_api_key}", f"{got.hf_token}"):
        assert API_KEY not in shown and HF_TOKEN not in shown


def test_optional_secrets_absent_are_none(tmp_path):
    got = secrets.load(S3, cwd=str(tmp_path))
    assert (got.vllm_api_key, got.hf_token) == (None, None)


def test_each_secret_from_env_else_file(tmp_path):
    f = tmp_path / "secrets.env"
    f.write_text(f"KVCEPH_VLLM_API_KEY={API_KEY}\nKVCEPH_HF_TOKEN='{HF_TOKEN}'\n")
    f.chmod(0o600)
    # S3 keys from the environment, the others from the file; an exported variable wins.
    got = secrets.load({**S3, "KVCEPH_SECRETS_FILE": str(f), "KVCEPH_HF_TOKEN": "hf_env"})
    assert got.access_key.reveal() == "AK1"
    assert got.vllm_api_key.reveal() == API_KEY
    assert got.hf_token.reveal() == "hf_env"


def test_world_readable_file_is_refused_even_when_the_env_has_the_s3_keys(tmp_path):
    f = tmp_path / "secrets.env"
    f.write_text(f"KVCEPH_VLLM_API_KEY={API_KEY}\n")
    f.chmod(0o644)
    with pytest.raises(secrets.SecretsError, match="chmod 600"):
        secrets.load({**S3, "KVCEPH_SECRETS_FILE": str(f)})


def test_whitespace_in_the_api_key_is_refused_without_showing_it():
    with pytest.raises(secrets.SecretsError, match="KVCEPH_VLLM_API_KEY contains whitespace") as e:
        secrets.load({**S3, "KVCEPH_VLLM_API_KEY": "sk-abc def"})
    assert "sk-abc" not in str(e.value)


# --- refusals before any host is touched ------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "kvceph_vllm_api_key",
        "kvceph_hf_token",
        "kvceph_s3_secret_key",
        "KVCEPH_VLLM_API_KEY",
        "KVCEPH_HF_TOKEN",
    ],
)
def test_secrets_in_group_data_are_refused_in_one_line(key):
    with pytest.raises(SettingsError) as e:
        load(**{key: "hf_leaked_value"})
    msg = str(e.value)
    assert "\n" not in msg and key in msg and "hf_leaked_value" not in msg
    assert "KVCEPH_HF_TOKEN" in msg and "secrets.env" in msg


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "VLLM_API_KEY",
        "DB_PASSWORD",
        "X_PASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "MY_CREDENTIAL",
    ],
)
def test_secret_looking_extra_env_is_refused_in_one_line(name):
    with pytest.raises(SettingsError) as e:
        load(kvceph_extra_env={name: "hf_leaked_value"})
    msg = str(e.value)
    assert msg.startswith(f"gpu1: kvceph_extra_env = '{name}': looks like a secret")
    assert "\n" not in msg and "hf_leaked_value" not in msg
    assert "KVCEPH_HF_TOKEN" in msg and "secrets.env" in msg


def test_secret_looking_profile_env_is_refused():
    with pytest.raises(SettingsError, match=r"kvceph_engine_profile.env = 'HF_TOKEN'"):
        load(kvceph_engine_profile={"env": {"HF_TOKEN": "x"}})


@pytest.mark.parametrize(
    "name", ["TOKENIZERS_PARALLELISM", "PT_HPU_GPU_MIGRATION", "KEYBOARD_LAYOUT", "MONKEY"]
)
def test_harmless_names_pass(name):
    assert not secret_names.looks_secret(name)
    assert dict(load(kvceph_extra_env={name: "1"}).engine.extra_env) == {name: "1"}


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--api-key", API_KEY], "--api-key"),
        ([f"--api-key={API_KEY}"], "--api-key"),
        (["--enforce-eager", "--hf-token", HF_TOKEN], "--hf-token"),
        ([f"--hf-token={HF_TOKEN}"], "--hf-token"),
        (["--ssl-keyfile-password", API_KEY], "--ssl-keyfile-password"),  # the name rule
        (["--aws-secret", API_KEY], "--aws-secret"),
    ],
)
def test_secret_arguments_in_the_profile_are_refused_in_one_line(args, flag):
    with pytest.raises(SettingsError) as e:
        load(kvceph_engine_profile={"extra_args": args})
    assert str(e.value) == (
        f"gpu1: kvceph_engine_profile.extra_args = '{flag}': passes a secret on the command "
        "line (readable in /proc/<pid>/cmdline, shown by systemctl show, the plan and the "
        "journal); fix: remove it; export KVCEPH_VLLM_API_KEY / KVCEPH_HF_TOKEN / "
        "KVCEPH_S3_ACCESS_KEY / KVCEPH_S3_SECRET_KEY or put them in secrets.env (0600; "
        "docs/security.md)"
    )
    assert API_KEY not in str(e.value) and HF_TOKEN not in str(e.value)


def test_extra_args_as_one_string_are_refused_without_showing_it():
    with pytest.raises(SettingsError) as e:
        load(kvceph_engine_profile={"extra_args": f"--api-key {API_KEY}"})
    assert "must be a list of arguments" in str(e.value) and API_KEY not in str(e.value)


# vLLM flags with a secret word inside, and the lab engine's own --bytes-per-token.
LOOK_ALIKES = [
    "--return-tokens-as-token-ids",
    "--long-prefill-token-threshold",
    "--max-num-batched-tokens",
    "--tokenizer",
    "--tokenizer-revision",
    "--ssl-keyfile",
    "--skip-tokenizer-init",
    "--bytes-per-token",
]


@pytest.mark.parametrize("flag", LOOK_ALIKES)
def test_flags_that_only_contain_a_secret_word_pass(flag):
    assert secret_names.secret_flag(flag) is None
    me = load(kvceph_engine_profile={"extra_args": [flag, "64"]})
    assert me.engine.profile.extra_args == (flag, "64")
    assert render.exec_start(me)[-2:] == [flag, "64"]


# --- on the host -----------------------------------------------------------------------------


def test_secrets_file_holds_the_set_secrets_quoted_for_systemd():
    text = render.secrets_env_file(creds(vllm_api_key=Secret('a$b"c'), hf_token=Secret(HF_TOKEN)))
    assert repr(text) == "'***'"
    lines = [x for x in text.reveal().splitlines() if not x.startswith("#")]
    assert lines == ['VLLM_API_KEY="a\\$b\\"c"', f'HF_TOKEN="{HF_TOKEN}"']
    assert [x for x in render.secrets_env_file(creds()).reveal().splitlines() if x[:1] != "#"] == []


def test_the_api_key_travels_in_the_environment_never_in_argv():
    me = load()
    c = creds(vllm_api_key=Secret(API_KEY), hf_token=Secret(HF_TOKEN))
    argv = render.exec_start(me)
    assert "--api-key" not in argv and API_KEY not in " ".join(argv)
    unit = render.unit(me)
    assert API_KEY not in unit and HF_TOKEN not in unit
    assert f"EnvironmentFile={paths.SECRETS_PATH}\n" in unit
    assert API_KEY not in render.env_file(me, render.digest(me, c))


def test_a_change_of_any_secret_changes_the_digest():
    me = load()
    base = render.digest(me, creds())
    with_key = render.digest(me, creds(vllm_api_key=Secret(API_KEY)))
    other_key = render.digest(me, creds(vllm_api_key=Secret(API_KEY + "x")))
    with_token = render.digest(me, creds(hf_token=Secret(HF_TOKEN)))
    assert len({base, with_key, other_key, with_token}) == 4


def test_bind_address_reaches_the_command_line():
    assert render.exec_start(load())[3:5] == ["--host", "0.0.0.0"]
    assert render.exec_start(load(kvceph_vllm_bind="127.0.0.1"))[3:5] == ["--host", "127.0.0.1"]


def test_verify_sends_the_api_key_on_every_request():
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from deploys.verification.transport import Http

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1/models"
        assert Http(api_key=Secret(API_KEY)).get(url, 5)[0] == 200
        assert Http().get(url, 5)[0] == 200
    finally:
        server.shutdown()
    assert seen == [f"Bearer {API_KEY}", None]


def test_gate_environment_keeps_loopback_open_for_the_deploys_own_checks():
    env = dict(render.environment(load(kvceph_vllm_open_networks=["10.9.0.0/16"])))
    assert env["KVCEPH_OPEN_NETWORKS"] == "127.0.0.0/8,::1/128,10.9.0.0/16"
    assert env["PYTHONPATH"] == paths.SCRIPT_DIR
    off = load(kvceph_vllm_guard=False)
    assert "--middleware" not in render.exec_start(off)
    assert "KVCEPH_OPEN_NETWORKS" not in dict(render.environment(off))
