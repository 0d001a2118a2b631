"""deploys/settings/run_control.py: every --data opt-in is read one way."""

from __future__ import annotations

import pytest

from deploys import settings
from deploys.settings import run_control
from deploys.settings.reader import SettingsError


def _run(**data):
    return settings.load({"kvceph_s3_endpoint_ip": "10.0.0.5", **data}, "ceph1", ["ceph_admin"]).run


def test_nothing_passed_is_nothing_allowed():
    assert _run() == run_control.RunControl()
    assert not any(vars(_run()).values())


@pytest.mark.parametrize(
    ("value", "want"),
    # What pyinfra's --data gives for true/false/1/0 (bool, int), other words stay strings.
    [(True, True), (False, False), (None, False), (1, True), (0, False)]
    + [(s, True) for s in ("true", "TRUE", "yes", "1", " Yes ")]
    + [(s, False) for s in ("false", "no", "0", "")],
)
@pytest.mark.parametrize("key", run_control.KEYS)
def test_every_opt_in_reads_the_same_values(key, value, want):
    name = key.removeprefix("kvceph_")
    assert getattr(_run(**{key: value}), name) is want


@pytest.mark.parametrize("value", ["maybe", 2, 0.5, ["true"]])
def test_anything_else_is_one_line_naming_key_and_fix(value):
    with pytest.raises(SettingsError) as err:
        _run(kvceph_allow_pg_decrease=value)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"ceph1: kvceph_allow_pg_decrease = {value!r}: must be true or false")
    assert "fix: pass --data kvceph_allow_pg_decrease=true" in message


def test_keys_are_the_documented_ones():
    assert run_control.KEYS == (
        "kvceph_break_lock",
        "kvceph_allow_data_movement",
        "kvceph_allow_pg_decrease",
        "kvceph_allow_lifecycle_removal",
        "kvceph_allow_unprobed_concentrator",
    )


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"kvceph_status_json": True},
            "ceph1: kvceph_status_json = True: must be a file path; fix: pass --data "
            "kvceph_status_json=PATH, or leave it out",
        ),
        (
            {"kvceph_status_png": [1]},
            "ceph1: kvceph_status_png = [1]: must be a file path; fix: pass --data "
            "kvceph_status_png=PATH, or leave it out",
        ),
        (
            {"kvceph_rotation": "remove"},
            "ceph1: kvceph_rotation = 'remove': must be one of add, retire; fix: pass --data "
            "kvceph_rotation=add (then deploy.py, then retire)",
        ),
        (
            {"kvceph_retire_access_key": "AKIA/secret+x"},
            "ceph1: kvceph_retire_access_key = '***': is not an access key (letters and "
            "digits); fix: pass --data kvceph_retire_access_key=<old access key> (never its "
            "secret)",
        ),
    ],
)
def test_every_entry_points_run_key_is_checked_in_settings(data, line):
    """status.py's and rotate.py's --data keys stop the run in the preflight's settings step,
    before any host is contacted (not with a TypeError after every host was read)."""
    with pytest.raises(SettingsError) as err:
        _run(**data)
    assert str(err.value) == line


def test_legitimate_run_keys_are_read():
    run = _run(
        kvceph_status_json="out/s.json",
        kvceph_status_png="s.png",
        kvceph_rotation="retire",
        kvceph_retire_access_key="AKIAOLD0001",
    )
    assert (run.status_json, run.status_png, run.rotation) == ("out/s.json", "s.png", "retire")
    assert run.retire_access_key == "AKIAOLD0001"


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, ()),
        ("", ()),
        ("rgw.tenant", ("rgw.tenant",)),
        (
            "rgw.tenant, client.rgw.tenant/rgw_dns_name",
            ("client.rgw.tenant/rgw_dns_name", "rgw.tenant"),
        ),
        (["pool/a", "pool/a"], ("pool/a",)),
    ],
)
def test_adopt_names_objects(value, want):
    assert _run(kvceph_adopt=value).adopt == want


def test_adopt_refuses_anything_but_names():
    with pytest.raises(SettingsError, match="kvceph_adopt = True: must name objects"):
        _run(kvceph_adopt=True)
