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
