"""Values rendered into files: one check per file format (deploys/settings/file_formats.py)."""

from __future__ import annotations

import pytest
from fake_deploy import fake_facts

from deploys import render
from deploys import settings as s
from deploys.settings import file_formats
from deploys.settings.reader import SettingsError
from deploys.stages import s3_tier

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}


def load(groups=("gpu",), **data):
    return s.load({**BASE, **data}, "gpu1", groups)


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"kvceph_s3_region": "default\nendpoint_url = http://203.0.113.9"},
            "gpu1: kvceph_s3_region = 'default\\nendpoint_url = http://203.0.113.9': holds a "
            "newline, which ~/.aws/config and the admin host's S3 INI (INI) cannot carry in a "
            "value; fix: write the value on one line, without it",
        ),
        (
            {"kvceph_s3_endpoint": "http://s3.cephlab.com:80\n"},
            "gpu1: kvceph_s3_endpoint = 'http://s3.cephlab.com:80\\n': holds a newline, which "
            "~/.aws/config and the admin host's S3 INI (INI) cannot carry in a value; fix: write "
            "the value on one line, without it",
        ),
        (
            {"kvceph_rgw_dns_name": "s3.cephlab.com #x"},
            "gpu1: kvceph_rgw_dns_name = 's3.cephlab.com #x': holds a space, which /etc/hosts "
            "(hosts) cannot carry in a value; fix: write the value on one line, without it",
        ),
        (
            {"kvceph_engine_profile": {"extra_args": ["--seed", "1\nExecStartPre=/bin/sh"]}},
            "gpu1: kvceph_engine_profile.extra_args = '1\\nExecStartPre=/bin/sh': holds a "
            "newline, which the engine's systemd unit (unit) cannot carry in a value; fix: write "
            "the value on one line, without it",
        ),
        (
            {"kvceph_lmcache_extra_config": {"s3_region\nx": False}},
            "gpu1: kvceph_lmcache_extra_config = 's3_region\\nx': holds a newline, which "
            "lmcache.yaml (YAML) cannot carry in a value; fix: write the value on one line, "
            "without it",
        ),
        (
            # The value is shown by its name: env values may be secret-like.
            {"kvceph_extra_env": {"NCCL_DEBUG": "INFO\0"}},
            "gpu1: kvceph_extra_env = 'NCCL_DEBUG': its value holds a NUL, which the engine's "
            "env file (env) cannot carry in a value; fix: write the value on one line, without it",
        ),
    ],
)
def test_value_its_file_cannot_carry_is_one_line_naming_the_key(data, line):
    with pytest.raises(SettingsError) as caught:
        load(**data)
    assert str(caught.value) == line


def test_admin_host_region_is_checked_too():
    with pytest.raises(SettingsError, match="kvceph_s3_region"):
        load(groups=("ceph_admin",), kvceph_s3_region="a\rb")


@pytest.mark.parametrize(
    "data",
    [
        # Look-alikes: what each format carries fine.
        {"kvceph_s3_region": "us-east-1"},
        {"kvceph_extra_env": {"NCCL_DEBUG": 'INFO # "quoted" $HOME = x'}},
        {"kvceph_engine_profile": {"extra_args": ["--served-model-name", "my model #1"]}},
        {
            "kvceph_lmcache_connector": "lmcache",
            "kvceph_lmcache_extra_config": {"s3_prefer_http2": False},
        },
    ],
)
def test_what_the_format_carries_stays_accepted(data):
    load(**data)


def _rendered(layout, host) -> str:
    me = layout.host_settings(host)
    creds = fake_facts.credentials()
    parts = [s3_tier.admin_config(me, creds.admin_access_key, creds.admin_secret_key)]
    if me.is_inference:
        parts += [
            render.unit(me),
            render.env_file(me),
            render.lmcache_yaml(me),
            render.aws_config(me),
            "\n".join(render.hosts_lines(me)),
        ]
    return "\n".join(parts)


# Values that show up only as words of other text ("lmcache" in paths, "vllm" in the unit).
_COINCIDENCES = {"kvceph_s3_user", "kvceph_engine_profile.name", "kvceph_lmcache_connector"}


def test_every_setting_the_renderer_writes_is_in_the_table():
    """A string setting whose value shows up in a rendered file is checked for that file."""
    layout = fake_facts.Layout("fake_fresh", converged=False)
    missed = set()
    for host in layout.hosts:
        text = _rendered(layout, host)
        for key, value in layout.merged_data(host).items():
            if not key.startswith("kvceph_"):
                continue
            fields = value.items() if isinstance(value, dict) else [("", value)]
            for field, inner in fields:
                name = f"{key}.{field}" if field and key == "kvceph_engine_profile" else key
                for _, text_value in file_formats.strings(inner):
                    if len(text_value) >= 6 and text_value in text:
                        missed.add(name)
    missed -= _COINCIDENCES
    assert missed <= set(file_formats.RENDERED), sorted(missed - set(file_formats.RENDERED))
