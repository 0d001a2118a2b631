"""Remote-tier settings: the connector choice, its knobs, prefill figures; the cache-group
check allows mixing connectors (same object names) and still refuses what changes the keys."""

import pytest

from deploys import settings as s
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import SettingsError
from deploys.settings.tier import CHECKOUT
from deploys.tier import crossover

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}


def load(groups=("gpu",), host="gpu1", **data):
    return s.load({**BASE, **data}, host, groups)


def test_defaults():
    for groups in (("gpu",), ("gaudi",)):
        tier = load(groups).lmcache.tier
        assert tier.connector == "kvceph"  # issue 37 item 2; Gaudi3 proven on the lab
        assert (tier.connections, tier.timeout_s, tier.min_hit_tokens) == (16, 5.0, None)
        assert tier.skip_short_puts is False
        assert tier.verify_crc32c is True  # issue 50 item 2
        assert tier.measured_dir == str(CHECKOUT / "measured") and tier.prefill_source == "default"
    assert load().lmcache.tier.prefill_points == crossover.DEFAULT_PREFILL["nvidia"]


def test_measured_dir_does_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load(kvceph_measured_dir="figures").lmcache.tier.measured_dir == str(
        CHECKOUT / "figures"
    )
    assert load(kvceph_measured_dir="/srv/m").lmcache.tier.measured_dir == "/srv/m"
    assert (CHECKOUT / "deploy.py").is_file()


def test_prefill_figure_is_length_dependent():
    # max_model_len 32768 (default): the fitted H200 curve's rate there, not a flat 5,000.
    rate = load().lmcache.prefill_tokens_per_s
    assert 2440 < rate < 4100
    flat = load(kvceph_prefill_tokens_per_s=5000).lmcache
    assert flat.tier.prefill_points == ((16384, 5000.0),)
    assert flat.prefill_tokens_per_s == pytest.approx(5000)
    two = load(kvceph_prefill_tokens_per_s={16384: 4100, 131072: 2440}, kvceph_max_model_len=131072)
    assert two.lmcache.prefill_tokens_per_s == pytest.approx(2440)


BAD = [
    ({"kvceph_lmcache_connector": "stock"}, "kvceph_lmcache_connector", "must be one of"),
    ({"kvceph_connector_connections": 0}, "kvceph_connector_connections", "must be >= 1"),
    ({"kvceph_connector_timeout_s": 0}, "kvceph_connector_timeout_s", "[0.1, 600]"),
    ({"kvceph_connector_timeout_s": True}, "kvceph_connector_timeout_s", "[0.1, 600]"),
    ({"kvceph_min_hit_tokens": -1}, "kvceph_min_hit_tokens", "must be >= 0"),
    (
        {"kvceph_skip_short_puts": True, "kvceph_lmcache_connector": "lmcache"},
        "kvceph_skip_short_puts",
        "needs kvceph's connector",
    ),
    (
        {"kvceph_connector_verify_crc32c": False, "kvceph_lmcache_connector": "lmcache"},
        "kvceph_connector_verify_crc32c",
        "is a setting of kvceph's connector, not 'lmcache'",
    ),
    (
        {"kvceph_lmcache_connector": "kvceph", "kvceph_skip_short_puts": "yes"},
        "kvceph_skip_short_puts",
        "",
    ),
    ({"kvceph_connector_receive_dir": "shm"}, "kvceph_connector_receive_dir", "does not match"),
    ({"kvceph_connector_refresh_s": -5}, "kvceph_connector_refresh_s", "must be >= 0"),
    ({"kvceph_connector_refresh_s": 7200}, "kvceph_connector_refresh_s", "must be <= 3600"),
    ({"kvceph_prefill_tokens_per_s": {16384: 0}}, "kvceph_prefill_tokens_per_s", "not > 0"),
    ({"kvceph_prefill_tokens_per_s": {"16k": 4100}}, "kvceph_prefill_tokens_per_s", "token count"),
    ({"kvceph_prefill_tokens_per_s": "fast"}, "kvceph_prefill_tokens_per_s", "{tokens: rate}"),
    (
        {
            "kvceph_lmcache_connector": "kvceph",
            "kvceph_lmcache_extra_config": {"s3_num_io_threads": 8},
        },
        "kvceph_lmcache_extra_config",
        "not kvceph's",
    ),
]


@pytest.mark.parametrize("data,key,expected", BAD, ids=[b[2] for b in BAD])
def test_bad_values_are_one_line_errors(data, key, expected):
    with pytest.raises(SettingsError) as err:
        load(host="h1", **data)
    message = str(err.value)
    assert message.startswith(f"h1: {key} = ") and expected in message
    assert "\n" not in message and "; fix: " in message


def test_kvceph_connector_with_no_stock_keys_is_fine():
    me = load(kvceph_lmcache_connector="kvceph", kvceph_lmcache_extra_config={})
    assert me.lmcache.tier.connector == "kvceph"


def _fleet(gpu1, gpu2):
    return [
        load(groups=("ceph_admin",), host="admin"),
        load(host="gpu1", **gpu1),
        load(host="gpu2", **gpu2),
    ]


def test_a_cache_group_may_mix_connectors():
    """The docs' promise: kvceph's connector names objects as the stock one does, so a group
    of both is one cache group (and can move from one to the other without losing its cache)."""
    groups = check_inventory(_fleet({"kvceph_lmcache_connector": "kvceph"}, {}))
    assert [g.hosts for g in groups] == [("gpu1", "gpu2")]


def test_mixing_connectors_does_not_hide_a_key_difference():
    with pytest.raises(SettingsError, match="gpu2: kvceph_lmcache_chunk_size = 512"):
        check_inventory(
            _fleet({"kvceph_lmcache_connector": "kvceph"}, {"kvceph_lmcache_chunk_size": 512})
        )


def test_crc32c_check_with_the_stock_connector_is_refused_in_one_line():
    # issue 49 item 8: it had no effect there and was accepted; unset, the stock connector is fine.
    with pytest.raises(SettingsError) as err:
        load(kvceph_lmcache_connector="lmcache", kvceph_connector_verify_crc32c=True)
    assert str(err.value) == (
        "gpu1: kvceph_connector_verify_crc32c = True: is a setting of kvceph's connector, not "
        "'lmcache' (the stock one checks no GET body: the setting would do nothing); fix: set "
        "kvceph_lmcache_connector: kvceph, or drop kvceph_connector_verify_crc32c"
    )
    assert load(kvceph_lmcache_connector="lmcache").lmcache.tier.connector == "lmcache"
    assert not load(kvceph_connector_verify_crc32c=False).lmcache.tier.verify_crc32c
