"""KV-affecting engine flags: normalised so vLLM's equal spellings compare equal, and compared
across a cache group (one line naming both hosts and the fix)."""

import pytest

from deploys import settings as s
from deploys.settings import kv_flags
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import SettingsError

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}


@pytest.mark.parametrize(
    "a, b",
    [
        (["-q", "FP8"], ["--quantization=fp8"]),
        (["--dtype", "half"], ["--dtype=float16"]),
        (["--dtype", "auto", "--pipeline-parallel-size", "1"], []),
        (["-pp", "2"], ["--pipeline_parallel_size=02"]),
        (["--hf-overrides", '{"b": 1, "a": {"y": 2, "x": 1}}'],
         ['--hf-overrides={"a":{"x":1,"y":2},"b":1}']),
        (["--enable-lora", "--lora-modules", "b=/m/b", "a=/m/a"],
         ["--lora-modules", "a=/m/a", "b=/m/b", "--enable-lora"]),
        (["--no-enable-lora"], []),
        (["--quantization", "awq", "--quantization", "fp8"], ["--quantization", "fp8"]),
        (["--max-num-seqs", "8", "--enforce-eager"], []),  # no effect on the KV
    ],
)  # fmt: skip
def test_equal_spellings_normalise_equal(a, b):
    assert kv_flags.normalise(a) == kv_flags.normalise(b)


@pytest.mark.parametrize(
    "a, b",
    [
        (["-q", "fp8"], []),
        (["--dtype", "bfloat16"], ["--dtype", "float16"]),
        (["-pp", "2"], []),
        (["--hf-overrides", '{"rope_scaling": {"factor": 4}}'], []),
        (["--enable-lora"], []),
        (["--load-format", "dummy"], []),
    ],
)
def test_kv_changing_flags_differ(a, b):
    assert kv_flags.normalise(a) != kv_flags.normalise(b)


def test_describe_is_one_readable_line():
    assert kv_flags.describe(["-q", "FP8", "--dtype=half"]) == "--dtype=float16 --quantization=fp8"
    assert kv_flags.describe(["--max-num-seqs", "8"]) == "none"


def _host(name, extra_args):
    profile = {"extra_args": extra_args}
    return s.load({**BASE, "kvceph_engine_profile": profile}, name, ("gpu",))


def test_a_cache_group_whose_flags_differ_is_refused_in_one_line():
    with pytest.raises(SettingsError) as err:
        check_inventory(
            [
                s.load(BASE, "ceph1", ("ceph_admin",)),
                _host("gpu1", ["--quantization", "fp8"]),
                _host("gpu2", []),
            ]
        )
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("gpu2: kvceph_engine_profile.extra_args (KV-affecting flags) = 'none'")
    assert "gpu1's '--quantization=fp8'" in line and "fix: use one value" in line


def test_a_group_agreeing_in_another_spelling_passes():
    groups = check_inventory(
        [
            s.load(BASE, "ceph1", ("ceph_admin",)),
            _host("gpu1", ["-q", "FP8", "--max-num-seqs", "4"]),
            _host("gpu2", ["--quantization=fp8", "--dtype", "auto"]),
        ]
    )
    assert [g.hosts for g in groups] == [("gpu1", "gpu2")]
