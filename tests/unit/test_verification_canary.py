"""kvceph_verify_canary_hosts: the setting's checks, and a run that restarts only the canaries."""

from types import SimpleNamespace

import pytest
from test_verification_runner import FakeControl, _by_step, _run, lab  # noqa: F401 (fixture)

from deploys.settings.reader import Reader, SettingsError
from deploys.settings.verification import check_canary_hosts, verify_settings


def _hosts(canaries, **other):
    """gpu1, gpu2 (one cache group), gaudi1 (another), ceph1 (no engine)."""

    def host(inference, value):
        verify = SimpleNamespace(canary_hosts=tuple(value))
        return SimpleNamespace(is_inference=inference, verify=verify)

    hosts = {n: host(True, other.get(n, canaries)) for n in ("gpu1", "gpu2", "gaudi1")}
    hosts["ceph1"] = host(False, ())
    groups = [
        SimpleNamespace(model="Qwen/Qwen3-32B", tensor_parallel_size=2, hosts=("gpu1", "gpu2")),
        SimpleNamespace(model="Qwen/Qwen3-32B", tensor_parallel_size=1, hosts=("gaudi1",)),
    ]
    return hosts, groups


def test_unset_or_one_per_group_passes():
    check_canary_hosts(*_hosts(()))
    check_canary_hosts(*_hosts(("gpu2", "gaudi1")))


@pytest.mark.parametrize(
    "canaries, other, message",
    [
        (("gpu2",), {}, "names none of cache group Qwen/Qwen3-32B TP=1 (gaudi1)"),
        (("gpu1", "gpu2", "gaudi1"), {}, "names 2 (gpu1, gpu2) of cache group"),
        (("gpu2", "ceph1"), {}, "'ceph1' is not an inference host of this inventory"),
        (("gpu2", "gaudi1"), {"gaudi1": ("gpu1", "gaudi1")}, "gaudi1: kvceph_verify_canary"),
    ],
    ids=["group_without", "two_in_a_group", "not_inference", "hosts_disagree"],
)
def test_a_wrong_canary_list_is_one_line_naming_key_and_fix(canaries, other, message):
    with pytest.raises(SettingsError) as exc:
        check_canary_hosts(*_hosts(canaries, **other))
    line = str(exc.value)
    assert message in line and "kvceph_verify_canary_hosts" in line and "fix:" in line
    assert "\n" not in line


@pytest.mark.parametrize("value", ["gpu1", ["gpu1", " gpu2"], ["gpu1", "gpu1"], [3]])
def test_the_setting_is_a_list_of_host_names(value):
    with pytest.raises(SettingsError, match="kvceph_verify_canary_hosts"):
        verify_settings(Reader({"kvceph_verify_canary_hosts": value}, "gpu1"))
    assert verify_settings(Reader({}, "gpu1")).canary_hosts == ()


def test_only_the_canary_engine_is_restarted(lab):  # noqa: F811
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    g = add("gaudi1", tp=1)
    control = FakeControl(engines)
    rep, _ = _run(bucket, engines, [[a, b], [g]], control=control, canaries=("gpu2", "gaudi1"))
    assert not rep.failures, rep.failure_lines()
    steps = _by_step(rep)
    assert control.restarts == ["gpu2", "gpu2", "gaudi1", "gaudi1"]
    assert steps[("gpu2", "warm")].verdict.status == "pass"
    assert steps[("gpu1", "cross-node")].hit_tokens == 1024  # the production engine: asked only


def test_a_canary_that_failed_preflight_restarts_nothing_in_its_group(lab):  # noqa: F811
    bucket, engines, add = lab
    a, b = add("gpu1"), add("gpu2")
    engines["gpu2"].health = 503
    control = FakeControl(engines)
    rep, _ = _run(bucket, engines, [[a, b]], control=control, canaries=("gpu2",))
    assert control.restarts == []
    cold = _by_step(rep)[("gpu1", "cold")].verdict
    assert cold.status == "skip" and "canary failed preflight" in cold.message
    assert [f.step for f in rep.failures] == ["preflight"]
