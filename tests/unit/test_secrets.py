"""Secrets come from the environment or a private file, and never print."""

import pytest

from deploys.settings import secrets


def test_env_wins_and_values_are_masked():
    creds = secrets.load({"KVCEPH_S3_ACCESS_KEY": "AK1", "KVCEPH_S3_SECRET_KEY": "SKsecret"})
    assert creds.secret_key.reveal() == "SKsecret"
    for shown in (str(creds), repr(creds), f"{creds.secret_key}", str(creds.secret_key)):
        assert "SKsecret" not in shown


def test_file_source(tmp_path):
    f = tmp_path / "secrets.env"
    f.write_text("# lab\nKVCEPH_S3_ACCESS_KEY=AK1\nKVCEPH_S3_SECRET_KEY='SK2'\n")
    f.chmod(0o600)
    creds = secrets.load({"KVCEPH_SECRETS_FILE": str(f)})
    assert (creds.access_key.reveal(), creds.secret_key.reveal()) == ("AK1", "SK2")


def test_world_readable_file_is_refused(tmp_path):
    f = tmp_path / "secrets.env"
    f.write_text("KVCEPH_S3_ACCESS_KEY=AK1\nKVCEPH_S3_SECRET_KEY=SK2\n")
    f.chmod(0o644)
    with pytest.raises(secrets.SecretsError, match="chmod 600"):
        secrets.load({"KVCEPH_SECRETS_FILE": str(f)})


def test_missing_source_says_where(tmp_path):
    wanted = "KVCEPH_S3_ADMIN_ACCESS_KEY and KVCEPH_S3_ACCESS_KEY_<GROUP>"
    with pytest.raises(secrets.SecretsError, match=wanted):
        secrets.load({}, cwd=str(tmp_path))


def test_whitespace_in_key_is_the_seeds_401():
    with pytest.raises(secrets.SecretsError, match="whitespace"):
        secrets.load({"KVCEPH_S3_ACCESS_KEY": "AK1 ", "KVCEPH_S3_SECRET_KEY": "SK"})
