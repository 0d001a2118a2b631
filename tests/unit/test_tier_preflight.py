"""The remote tier's preflight (connector fits LMCache, crossover per group) and the measured
figures verify.py stores for it: written, read back, and a new crossover in lmcache.yaml."""

import dataclasses
import json
from types import SimpleNamespace

import pytest

from deploys import render, tier_preflight
from deploys import settings as s
from deploys.monitoring import savings
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import SettingsError
from deploys.tier import connector_package, measured
from deploys.verification import controller, targets

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_lmcache_connector": "kvceph"}


def fleet(tmp_path, **gpu):
    data = {**BASE, "kvceph_measured_dir": str(tmp_path / "measured"), **gpu}
    hosts = {
        "admin": s.load(BASE, "admin", ("ceph_admin",)),
        "gpu1": s.load(data, "gpu1", ("gpu",)),
        # A group of its own: the stock connector names objects outside kvceph's namespaces.
        "gpu2": s.load(
            {**data, "kvceph_lmcache_connector": "lmcache", "kvceph_tensor_parallel_size": 1},
            "gpu2",
            ("gpu",),
        ),
    }
    return hosts, check_inventory(list(hosts.values()))


def test_unsupported_lmcache_is_refused_before_any_host(tmp_path):
    hosts, _ = fleet(tmp_path)
    wheel = connector_package.build()
    tier_preflight.check_connector(hosts)  # 0.5.6: fine
    other = dataclasses.replace(wheel, supported_lmcache=("0.6.0",))
    with pytest.raises(SettingsError, match="gpu1: kvceph_lmcache_connector = 'kvceph': "):
        tier_preflight.check_connector(hosts, build=lambda: other)


def test_missing_package_is_a_settings_error(tmp_path):
    hosts, _ = fleet(tmp_path)

    def gone():
        raise connector_package.PackageError("controller: connector/: gone; fix: x")

    with pytest.raises(SettingsError, match="connector/: gone"):
        tier_preflight.check_connector(hosts, build=gone)


def test_first_deploy_renders_zero_and_the_plan_says_why(tmp_path):
    hosts, groups = fleet(tmp_path)
    hosts = tier_preflight.resolve(hosts)
    assert hosts["gpu1"].lmcache.tier.crossover.min_hit_tokens == 0
    line = tier_preflight.plan_lines(hosts, groups)[0]
    assert "0 tokens (not measured yet" in line and "Qwen--Qwen3-32B-tp2.json" in line
    assert "kvceph.min_hit_tokens on gpu1" in line


def _checked(hosts, groups):
    return SimpleNamespace(hosts=hosts, cache_groups=groups)


def test_verify_measurement_changes_the_crossover_and_lmcache_yaml(tmp_path):
    hosts, groups = fleet(tmp_path)
    hosts = tier_preflight.resolve(hosts)
    before = render.lmcache_yaml(hosts["gpu1"])
    writer = targets.Target("gpu1", "http://x", "Qwen/Qwen3-32B", 2, 256, False, 1, 32768)
    # Slow loads (the first H200 proof: warm x1.8 of cold at 16k).
    figures = {"prompt_tokens": 16384, "cold_ttft_s": 4.0, "warm_ttft_s": 7.2,
               "kv_bytes": 16384 * 131072 * 2}  # fmt: skip
    line = controller.record_measurement(_checked(hosts, groups), writer, figures, "v1", "t0")
    path = measured.path_for(str(tmp_path / "measured"), "Qwen/Qwen3-32B", 2)
    assert str(path) in line and "was 0: the next deploy.py renders it" in line
    stored = json.loads(path.read_text())
    assert stored["verify_run"] == "v1" and stored["host"] == "gpu1"
    again = tier_preflight.resolve(hosts)
    decided = again["gpu1"].lmcache.tier.crossover
    assert decided.min_hit_tokens > 16384 and "measured by verify.py run v1" in decided.source
    after = render.lmcache_yaml(again["gpu1"])
    assert after != before and f"kvceph.min_hit_tokens: {decided.min_hit_tokens}\n" in after
    # A second run within noise of the crossover in use keeps the file: no roll for noise.
    noisy = {**figures, "warm_ttft_s": 7.25}
    kept = controller.record_measurement(_checked(again, groups), writer, noisy, "v2", "t1")
    assert "within noise" in kept and json.loads(path.read_text())["verify_run"] == "v1"
    # The setting still wins over any measurement.
    fixed, _ = fleet(tmp_path, kvceph_min_hit_tokens=512)
    assert tier_preflight.resolve(fixed)["gpu1"].lmcache.tier.crossover.min_hit_tokens == 512


def test_an_unusable_measurement_file_stops_the_run(tmp_path):
    hosts, _ = fleet(tmp_path)
    path = measured.path_for(str(tmp_path / "measured"), "Qwen/Qwen3-32B", 2)
    path.parent.mkdir(parents=True)
    path.write_text('{"prompt_tokens": 0}')
    with pytest.raises(SettingsError, match="missing or out of range .*; fix: delete it"):
        tier_preflight.resolve(hosts)


GOOD = {"prompt_tokens": 16384, "cold_ttft_s": 4.0, "warm_ttft_s": 1.5, "kv_bytes": 2**32}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[]", "holds a JSON list, not verify.py's object"),
        ("NaN", "unreadable (NaN is not a number)"),
        (json.dumps(GOOD).replace("4.0", "Infinity"), "unreadable (Infinity is not a number)"),
        (json.dumps({**GOOD, "prompt_tokens": 1e-320}), "prompt_tokens missing or out of range"),
        (json.dumps({**GOOD, "warm_ttft_s": 1e308}), "warm_ttft_s missing or out of range"),
        ("[" * 100000, "unreadable"),
    ],
)
def test_a_measured_file_never_raises_more_than_one_line(tmp_path, text, problem):
    hosts, _ = fleet(tmp_path)
    path = measured.path_for(str(tmp_path / "measured"), "Qwen/Qwen3-32B", 2)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(SettingsError) as caught:
        tier_preflight.resolve(hosts)
    line = str(caught.value)
    assert line.startswith(f"controller: {path}: {problem}") and "\n" not in line
    assert line.endswith("; fix: delete it and rerun verify.py")
    # status.py reads the same file and never stops on it.
    savings.prefill_seconds_per_token(hosts["gpu1"], 16384)


def test_a_measured_file_at_the_bounds_is_read(tmp_path):
    hosts, _ = fleet(tmp_path)
    path = measured.path_for(str(tmp_path / "measured"), "Qwen/Qwen3-32B", 2)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**GOOD, "prompt_tokens": 1, "cold_ttft_s": 1e-6}))
    tier_preflight.resolve(hosts)
