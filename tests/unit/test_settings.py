"""Settings: defaults, and every bad value rejected with one line naming host, key and fix."""

import pytest

from deploys import settings as s
from deploys.settings.inventory import CacheGroup, check_inventory, python_minor_mismatch
from deploys.settings.reader import SettingsError

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
# LMCache's stock S3 connector, pinned where a test reads its extra_config keys (kvceph's
# connector, the default, refuses them).
STOCK = {"kvceph_lmcache_connector": "lmcache"}


def load(groups=("gpu",), host="gpu1", **data):
    return s.load({**BASE, **data}, host, groups)


def test_defaults_follow_the_seed_where_it_is_right():
    h = load()
    assert h.lmcache.chunk_size == 256
    assert h.engine.tensor_parallel_size == 2
    assert h.engine.python_hash_seed == 67
    assert h.engine.gpu_memory_utilization == 0.55
    assert h.s3.remote_url == "s3://lmcache.s3.cephlab.com:443"
    assert h.s3.disable_tls is False  # https by default
    assert h.engine.profile.vllm_version == "0.25.1"


def test_defaults_correct_the_seed_where_it_is_wrong():
    h = load()
    # 131072 exceeds Qwen3-32B's native 40960; vLLM refuses it without YaRN.
    assert h.engine.max_model_len == 40960
    # LMCache's builtin hash depends on the Python minor; sha256_cbor does not.
    assert h.lmcache.hash_algorithm == "sha256_cbor"
    assert h.engine.kv_load_failure_policy == "recompute"


def test_gaudi_defaults():
    h = load(groups=("gaudi",), host="gaudi1")
    assert h.engine.accelerator == "gaudi"
    assert h.engine.kv_block_size == 128
    assert h.engine.profile.vllm_version == "0.26.0"
    assert dict(h.engine.extra_env) == {"PT_HPU_GPU_MIGRATION": "1"}
    assert "VLLM_SKIP_WARMUP" not in dict(h.engine.extra_env)


def test_seed_extra_keys_are_dropped_not_rendered():
    h = load(
        **STOCK,
        kvceph_lmcache_extra_config={"s3_max_io_concurrency": 1024, "s3_prefer_http2": False},
    )
    assert h.lmcache.dropped_keys == ("s3_max_io_concurrency",)
    assert dict(h.lmcache.extra_config) == {"s3_prefer_http2": False}


def test_ceph_admin_pools_default_to_the_seed():
    h = load(groups=("ceph_admin",), host="admin")
    data, index = h.ceph.pools
    assert (data.name, data.pg_num, data.size, data.min_size) == (
        "default.rgw.buckets.data",
        2048,
        2,
        1,
    )
    assert (index.pg_num, index.size) == (64, None)
    assert h.engine is None


BAD = [
    # (groups, data, expected substring of the one-line message)
    (("ceph_admin",), {"kvceph_ceph_pools": [{"name": "p", "pg_num": 100}]}, "pg_num = 100"),
    (("ceph_admin",), {"kvceph_ceph_pools": [{"name": "bad name", "pg_num": 8}]}, ".name"),
    (
        ("ceph_admin",),
        {"kvceph_ceph_pools": [{"name": "p", "pg_num": 8, "size": 1, "min_size": 2}]},
        "min_size = 2: exceeds size 1",
    ),
    (("ceph_admin",), {"kvceph_ceph_pools": [{"name": "p", "pg_num": 8, "size": 0}]}, "size = 0"),
    (
        ("ceph_admin",),
        {"kvceph_ceph_pools": [{"name": "p", "pg_num": 8, "type": "erasure"}]},
        "only replicated",
    ),
    (
        ("ceph_admin",),
        {"kvceph_ceph_pools": [{"name": "p", "pg_num": 8}, {"name": "p", "pg_num": 8}]},
        "pool names repeat",
    ),
    ((), {"kvceph_rgw_frontend_port": 70000}, "kvceph_rgw_frontend_port = 70000"),
    ((), {"kvceph_rgw_concentrator_port": 8080}, "equals kvceph_rgw_frontend_port"),
    ((), {"kvceph_rgw_networks": ["10.67.67.0/33"]}, "is not a CIDR"),
    ((), {"kvceph_rgw_exit_timeout_secs": 0}, "kvceph_rgw_exit_timeout_secs = 0"),
    ((), {"kvceph_s3_bucket": "LMCache"}, "DNS-legal"),
    ((), {"kvceph_s3_bucket": "lm.cache"}, "DNS-legal"),
    ((), {"kvceph_s3_endpoint": "s3.cephlab.com:80"}, "scheme must be http or https"),
    ((), {"kvceph_s3_endpoint": "http://s3.cephlab.com:80/bucket"}, "scheme://host:port only"),
    ((), {"kvceph_s3_endpoint": "http://s3.cephlab.com:99999"}, "invalid port"),
    ((), {"kvceph_s3_endpoint": "http://other.example:80"}, "differs from kvceph_rgw_dns_name"),
    (
        (),
        {"kvceph_s3_endpoint_ip": None, "kvceph_rgw_managed_by": "external"},
        "kvceph_s3_endpoint_ips = None: needed when kvceph_s3_wildcard_dns is False",
    ),
    (
        (),
        {"kvceph_s3_endpoint_ips": ["10.0.0.6"]},
        "kvceph_s3_endpoint_ips = ['10.0.0.6']: is set together with kvceph_s3_endpoint_ip; "
        "fix: keep one of the two keys",
    ),
    ((), {"kvceph_s3_endpoint_ip": None, "kvceph_s3_endpoint_ips": []}, "is empty"),
    ((), {"kvceph_s3_endpoint_ip": None, "kvceph_s3_endpoint_ips": "10.0.0.6"}, "must be a list"),
    (
        (),
        {"kvceph_s3_endpoint_ip": None, "kvceph_s3_endpoint_ips": ["10.0.0.6", "s3"]},
        "kvceph_s3_endpoint_ips = 's3': is not an IP address",
    ),
    (
        (),
        {"kvceph_s3_endpoint_ip": None, "kvceph_s3_endpoint_ips": ["10.0.0.6", "10.0.0.6"]},
        "lists an address twice",
    ),
    ((), {"kvceph_s3_access_key": "AKIA"}, "secrets must not live in group_data"),
    ((), {"kvceph_vllm_bind": "localhost"}, "is not an IP address"),
    ((), {"kvceph_s3_region": " default"}, "whitespace"),
    (("gpu",), {"kvceph_lmcache_chunk_size": 0}, "kvceph_lmcache_chunk_size = 0"),
    (("gpu",), {"kvceph_lmcache_chunk_size": 100}, "multiple of the nvidia KV block size 16"),
    (("gaudi",), {"kvceph_lmcache_chunk_size": 64}, "multiple of the gaudi KV block size 128"),
    (("gpu",), {"kvceph_tensor_parallel_size": 3}, "power of two"),
    (
        ("gpu",),
        {"kvceph_tensor_parallel_size": 4, "kvceph_accelerator_count": 2},
        "exceeds the host's 2 accelerators",
    ),
    (("gpu",), {"kvceph_model": ""}, "kvceph_model"),
    (("gpu",), {"kvceph_gpu_memory_utilization": 1.5}, "kvceph_gpu_memory_utilization"),
    (("gpu",), {"kvceph_engine_profile": {"vllm_version": "0.20.0"}}, "unsupported vLLM version"),
    (
        ("gpu",),
        {"kvceph_engine_profile": {"lmcache_version": "0.3.1"}},
        "unsupported LMCache version",
    ),
    (("gpu",), {**STOCK, "kvceph_lmcache_extra_config": {"s3_region": "x"}}, "derived from the S3"),
    (
        ("gpu",),
        {**STOCK, "kvceph_lmcache_extra_config": {"s3_bogus": 1}},
        "is not read by LMCache 0.5.6",
    ),
    (
        ("gpu",),
        {"kvceph_lmcache_extra_config": {"save_chunk_meta": True}},
        "requires it False",
    ),
    (("gaudi",), {"kvceph_extra_env": {}}, "PT_HPU_GPU_MIGRATION=1"),
    (("gpu",), {"kvceph_kv_role": "both"}, "kvceph_kv_role = 'both'"),
    (("gpu", "gaudi"), {}, "both gpu and gaudi"),
]


@pytest.mark.parametrize("groups,data,expected", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_settings_are_one_line_errors(groups, data, expected):
    with pytest.raises(SettingsError) as err:
        load(groups=groups, host="h1", **data)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message
    assert message.startswith("h1: ")
    assert "; fix: " in message


def _fleet(**gpu2):
    return [
        load(groups=("ceph_admin",), host="admin"),
        load(host="gpu1"),
        load(host="gpu2", **gpu2),
    ]


def test_cache_groups_are_model_and_tp():
    hosts = _fleet() + [load(groups=("gaudi",), host="gaudi1", kvceph_tensor_parallel_size=4)]
    groups = check_inventory(hosts)
    assert [(g.model, g.tensor_parallel_size, g.hosts) for g in groups] == [
        ("Qwen/Qwen3-32B", 2, ("gpu1", "gpu2")),
        ("Qwen/Qwen3-32B", 4, ("gaudi1",)),
    ]


@pytest.mark.parametrize(
    "data,key",
    [
        ({"kvceph_python_hash_seed": 68}, "kvceph_python_hash_seed"),
        ({"kvceph_lmcache_chunk_size": 512}, "kvceph_lmcache_chunk_size"),
        ({"kvceph_kv_dtype": "fp8"}, "kvceph_kv_dtype"),
        ({"kvceph_lmcache_hash_algorithm": "builtin"}, "kvceph_lmcache_hash_algorithm"),
        ({"kvceph_s3_bucket": "other"}, "kvceph_s3_bucket"),
    ],
)
def test_group_invariants_explain_why(data, key):
    with pytest.raises(SettingsError) as err:
        check_inventory(_fleet(**data))
    message = str(err.value)
    assert message.startswith(f"gpu2: {key} = ")
    assert "never reuse each other's cache" in message


def test_gaudi_on_other_vllm_in_same_group_is_refused():
    hosts = _fleet() + [load(groups=("gaudi",), host="gaudi1")]
    with pytest.raises(SettingsError, match="vllm_version"):
        check_inventory(hosts)


def test_inventory_shape_errors():
    with pytest.raises(SettingsError, match="exactly one Ceph admin"):
        check_inventory([load(host="gpu1")])
    two = [load(groups=("ceph_admin",), host=h) for h in ("a", "b")] + [load()]
    with pytest.raises(SettingsError, match="exactly one Ceph admin"):
        check_inventory(two)
    with pytest.raises(SettingsError, match="no inference hosts"):
        check_inventory([load(groups=("ceph_admin",), host="admin")])


def test_python_minor_matters_only_for_builtin_hash():
    group = CacheGroup("m", 2, ("gpu1", "gpu2"))
    pythons = {"gpu1": "3.11", "gpu2": "3.12"}
    assert python_minor_mismatch(group, "sha256_cbor", pythons) is None
    message = python_minor_mismatch(group, "builtin", pythons)
    assert "gpu1=3.11, gpu2=3.12" in message and "sha256_cbor" in message


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            {"s3_prefer_http2": "false"},
            "gpu1: kvceph_lmcache_extra_config.s3_prefer_http2 = 'false': LMCache 0.5.6 reads "
            "it with bool() (any non-empty string reads as True); fix: use True or False (no "
            "quotes)",
        ),
        (
            {"s3_num_io_threads": "8"},
            "gpu1: kvceph_lmcache_extra_config.s3_num_io_threads = '8': LMCache 0.5.6 reads it "
            "with int() (the connector fails at engine start); fix: use a whole number >= 1 (no "
            "quotes)",
        ),
        (
            {"s3_num_io_threads": True},
            "gpu1: kvceph_lmcache_extra_config.s3_num_io_threads = True: LMCache 0.5.6 reads it "
            "with int() (the connector fails at engine start); fix: use a whole number >= 1 (no "
            "quotes)",
        ),
        (
            {"s3_enable_s3express": [1]},
            "gpu1: kvceph_lmcache_extra_config.s3_enable_s3express = [1]: LMCache 0.5.6 reads "
            "it with bool() (any non-empty string reads as True); fix: use True or False (no "
            "quotes)",
        ),
    ],
)
def test_extra_config_value_of_another_type_than_lmcache_reads_is_refused(extra, line):
    with pytest.raises(SettingsError) as caught:
        load(**STOCK, kvceph_lmcache_extra_config=extra)
    assert str(caught.value) == line


def test_extra_config_of_the_type_lmcache_reads_is_accepted():
    h = load(**STOCK, kvceph_lmcache_extra_config={"s3_prefer_http2": True, "s3_num_io_threads": 8})
    assert dict(h.lmcache.extra_config) == {"s3_prefer_http2": True, "s3_num_io_threads": 8}


def test_every_extra_config_key_kvceph_passes_has_its_type():
    from deploys.engine import versions

    for lmc, allowed in versions.LMCACHE_S3_EXTRA_KEYS.items():
        assert set(versions.LMCACHE_S3_EXTRA_TYPES[lmc]) == allowed


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"kvceph_lmcache_chunk_size": 1024, "kvceph_max_model_len": 512},
            "gpu1: kvceph_lmcache_chunk_size = 1024: is above kvceph_max_model_len 512: no chunk "
            "is ever full, so the tier stores nothing; fix: use a multiple of 16 of at most 512, "
            "e.g. 256",
        ),
        (
            {"kvceph_min_hit_tokens": 50000},
            "gpu1: kvceph_min_hit_tokens = 50000: is above kvceph_max_model_len 40960: no "
            "request is that long, so the tier never loads; fix: use at most 40960, or unset it "
            "(the measured crossover)",
        ),
        (
            {"kvceph_lmcache_remote_serde": "cachegen"},
            "gpu1: kvceph_lmcache_remote_serde = 'cachegen': LMCache 0.5.6's S3 connector "
            "refuses every cachegen upload (not a whole S3 part), so the tier stores nothing; "
            "fix: use naive",
        ),
        (
            {"kvceph_lmcache_remote_serde": "kivi"},
            "gpu1: kvceph_lmcache_remote_serde = 'kivi': is a no-op stub in LMCache 0.5.6 "
            "(nothing is compressed; the async loading path never deserializes); fix: use naive",
        ),
        (
            {"kvceph_connector_timeout_s": 0.05},
            "gpu1: kvceph_connector_timeout_s = 0.05: must be a number in [0.1, 600]; fix: use "
            "e.g. 5.0",
        ),
    ],
)
def test_settings_under_which_the_tier_stores_or_loads_nothing_are_refused(data, line):
    with pytest.raises(SettingsError) as caught:
        load(**data)
    assert str(caught.value) == line


def test_tier_settings_at_their_bounds_are_accepted():
    h = load(
        kvceph_lmcache_chunk_size=512,
        kvceph_max_model_len=512,
        kvceph_min_hit_tokens=512,
        kvceph_connector_timeout_s=0.1,
    )
    assert (h.lmcache.chunk_size, h.lmcache.tier.min_hit_tokens) == (512, 512)
    assert h.lmcache.tier.timeout_s == 0.1


def _inventory(admin: dict | None = None, gpu: dict | None = None):
    return [
        s.load({**BASE, **(admin or {})}, "ceph1", ("ceph_admin", "rgw")),
        s.load({**BASE, **(gpu or {})}, "gpu1", ("gpu",)),
    ]


@pytest.mark.parametrize(
    ("admin", "gpu", "line"),
    [
        (
            {},
            {"kvceph_ceph_pools": [{"name": "p", "pg_num": 8}]},
            "gpu1: kvceph_ceph_pools is set where it has no effect (it acts on ceph1 "
            "(ceph_admin/rgw) only): it would be ignored and never checked; fix: set it in the "
            "group_data of the hosts it acts on (or all.py)",
        ),
        (
            {"kvceph_tensor_parallel_size": 4},
            {},
            "ceph1: kvceph_tensor_parallel_size is set where it has no effect (it acts on gpu1 "
            "(gpu) only): it would be ignored and never checked; fix: set it in the group_data "
            "of the hosts it acts on (or all.py)",
        ),
        (
            {"kvceph_model": "Qwen/Qwen3-8B"},
            {},
            "ceph1: kvceph_model is set where it has no effect (it acts on gpu1 (gpu) only): it "
            "would be ignored and never checked; fix: set it in the group_data of the hosts it "
            "acts on (or all.py)",
        ),
        (
            {"kvceph_lmcache_connector": "kvceph"},
            {},
            "ceph1: kvceph_lmcache_connector is set where it has no effect (it acts on gpu1 "
            "(gpu) only): it would be ignored and never checked; fix: set it in the group_data "
            "of the hosts it acts on (or all.py)",
        ),
    ],
)
def test_a_key_set_only_where_it_has_no_effect_is_refused(admin, gpu, line):
    """Also for keys every host's file-format check looks at (kvceph_model: a unit value)."""
    with pytest.raises(SettingsError) as caught:
        check_inventory(_inventory(admin, gpu))
    assert str(caught.value) == line


def test_a_key_set_everywhere_or_where_it_acts_is_accepted():
    pools = [{"name": "p", "pg_num": 8}]
    # all.py reaches every host: it acts on the admin host, the others ignore it.
    check_inventory(_inventory({"kvceph_ceph_pools": pools}, {"kvceph_ceph_pools": pools}))
    check_inventory(_inventory({"kvceph_ceph_pools": pools}, {"kvceph_tensor_parallel_size": 4}))
    # Read on no host (the source decides): nowhere to name, left alone.
    check_inventory(_inventory({}, {"kvceph_model_mirror_from": "/srv/models/x"}))


def test_ceph_hostname_is_checked_before_any_stage():
    with pytest.raises(SettingsError) as caught:
        load(groups=("rgw",), kvceph_ceph_hostname="not a host!")
    assert str(caught.value) == (
        "gpu1: kvceph_ceph_hostname = 'not a host!': is not a host name; fix: use the name "
        "`ceph orch host ls` shows"
    )
    assert load(groups=("rgw",), kvceph_ceph_hostname="ceph-02.example.com")


def test_profile_packages_as_a_string_is_refused():
    with pytest.raises(SettingsError) as caught:
        load(kvceph_engine_profile={"packages": "vllm==0.33.0"})
    assert str(caught.value) == (
        "gpu1: kvceph_engine_profile.packages = 'vllm==0.33.0': must be a list of pip "
        "requirements; fix: one list item per package, e.g. ['vllm==0.33.0', 'lmcache==0.5.6']"
    )


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"kvceph_lmcache_connector": "kvceph",
             "kvceph_connector_receive_dir": "/dev/shm/../../etc/kvceph"},
            "gpu1: kvceph_connector_receive_dir = '/dev/shm/../../etc/kvceph': has a '..' part; "
            "fix: give the directory without '..'",
        ),
        (
            {"kvceph_model": "Qwen/Qwen3\u200b-32B", "kvceph_kv_bytes_per_token": 262144},
            "gpu1: kvceph_model = 'Qwen/Qwen3\\u200b-32B': is neither a model id (org/name of "
            "letters, digits, _ . -) nor an absolute directory; fix: use the model's id, e.g. "
            "Qwen/Qwen3-32B; vLLM flags go in kvceph_engine_profile.extra_args",
        ),
        (
            {"kvceph_model": "Qwen/Qwen3-32B --trust-remote-code"},
            "gpu1: kvceph_model = 'Qwen/Qwen3-32B --trust-remote-code': is neither a model id "
            "(org/name of letters, digits, _ . -) nor an absolute directory; fix: use the "
            "model's id, e.g. Qwen/Qwen3-32B; vLLM flags go in kvceph_engine_profile.extra_args",
        ),
        (
            {"kvceph_model": "org/" + "m" * 2000, "kvceph_kv_bytes_per_token": 262144},
            "gpu1: kvceph_model = 'org/mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm...': makes the "
            "model argument 2004 bytes long; LMCache's object keys carry it, and S3 keys end at "
            "1024 bytes; fix: keep the model argument within 896 bytes",
        ),
        (
            {"kvceph_model_source": "path", "kvceph_model_path": "/m/" + "d" * 1500,
             "kvceph_kv_bytes_per_token": 262144},
            "gpu1: kvceph_model_path = '/m/ddddddddddddddddddddddddddddddddddddd...': makes the "
            "model argument 1503 bytes long; LMCache's object keys carry it, and S3 keys end at "
            "1024 bytes; fix: keep the model argument within 896 bytes",
        ),
        (
            {"kvceph_s3_lifecycle_rule_id": "r" * 300},
            "gpu1: kvceph_s3_lifecycle_rule_id = 'rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr...': "
            "is 300 characters; S3 allows 255; fix: use a short ID, e.g. kvceph-expire",
        ),
    ],
)  # fmt: skip
def test_names_and_paths_that_would_not_be_what_they_say_are_refused(data, line):
    with pytest.raises(SettingsError) as caught:
        load(**data)
    assert str(caught.value) == line


def test_names_and_paths_that_look_alike_are_accepted():
    assert load(kvceph_model="meta-llama/Llama-3.1-8B-Instruct", kvceph_kv_bytes_per_token=131072)
    assert load(kvceph_model="/srv/models/qwen3..32b", kvceph_kv_bytes_per_token=1)
    assert load(kvceph_lmcache_connector="kvceph", kvceph_connector_receive_dir="/dev/shm/kv..x")
    assert load(kvceph_s3_lifecycle_rule_id="r" * 255)
    assert load(kvceph_model="org/" + "m" * 892, kvceph_kv_bytes_per_token=262144)


def test_fp8_kv_on_gaudi_is_refused_and_stays_on_nvidia():
    with pytest.raises(SettingsError) as caught:
        load(groups=("gaudi",), host="gaudi1", kvceph_kv_dtype="fp8")
    assert str(caught.value) == (
        "gaudi1: kvceph_kv_dtype = 'fp8': the Gaudi engine takes FP8 KV only as fp8_inc with "
        "Intel Neural Compressor and a QUANT_CONFIG calibration of the model, which kvceph does "
        "not set up; fix: use bfloat16 on gaudi hosts"
    )
    assert load(kvceph_kv_dtype="fp8").engine.kv_dtype == "fp8"
    assert load(groups=("gaudi",), host="gaudi1").engine.kv_dtype == "bfloat16"


# --- a pair that loads wrong KV (versions.KV_LOAD_DEFECTS) -----------------------------------


def _real(vllm: str) -> dict:
    return {"vllm_version": vllm, "packages": [f"vllm=={vllm}", "lmcache==0.5.6"]}


def test_a_real_vllm_with_a_kv_load_defect_is_refused_on_nvidia():
    with pytest.raises(SettingsError) as exc:
        load(kvceph_engine_profile=_real("0.33.0"))
    assert str(exc.value) == (
        "gpu1: kvceph_engine_profile = 'vLLM 0.33.0 + LMCache 0.5.6': LMCache loads wrong KV into "
        "this vLLM on NVIDIA (LMCache issue #4463: answers from cache hits are garbage); fix: use "
        "the default profile (vLLM 0.25.1), or set kvceph_accept_kv_load_defect = True"
    )
    with pytest.raises(SettingsError, match="0.26.0 \\+ LMCache 0.5.6"):
        load(kvceph_engine_profile=_real("0.26.0"))


def test_the_defect_is_accepted_only_when_said_and_only_where_it_applies():
    accepted = load(kvceph_engine_profile=_real("0.33.0"), kvceph_accept_kv_load_defect=True)
    assert accepted.engine.profile.vllm_version == "0.33.0"
    # the default, a patch release of it, the Gaudi plugin's 0.26 and the lab engine emulating
    # 0.33 (it loads what it stored) are not refused
    assert load().engine.profile.vllm_version == "0.25.1"
    assert load(kvceph_engine_profile=_real("0.25.2")).engine.profile.vllm_version == "0.25.2"
    assert load(("gaudi",), "gaudi1").engine.profile.vllm_version == "0.26.0"
    lab = {**_real("0.33.0"), "packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"]}
    assert load(kvceph_engine_profile=lab).engine.profile.vllm_version == "0.33.0"
    with pytest.raises(SettingsError, match="must be True or False"):
        load(kvceph_engine_profile=_real("0.33.0"), kvceph_accept_kv_load_defect="yes")


def test_engines_bind_the_inventory_address_by_default_not_every_interface():
    assert load(ssh_hostname="10.0.0.21").security.vllm_bind == "10.0.0.21"
    assert load(ssh_hostname="fd00::21").security.vllm_bind == "fd00::21"
    # a name would need resolving on the host: the wildcard, behind the gate
    assert load(ssh_hostname="gpu1.example").security.vllm_bind == "0.0.0.0"
    assert load(ssh_hostname="10.0.0.21", kvceph_vllm_bind="::").security.vllm_bind == "::"


def test_the_lab_marks_itself_and_a_fleet_is_not_a_lab():
    assert load().lab is False
    assert load(kvceph_lab=True).lab is True
    assert load(kvceph_lab=True, kvceph_s3_endpoint="http://s3.cephlab.com:80").s3.scheme == "http"


def test_safe_defaults_rgw_label_and_verify_restart_bound():
    admin = load(groups=("ceph_admin", "rgw"), host="ceph1")
    assert admin.rgw.label == "kvceph-rgw"  # not `rgw`: a cluster's own RGW hosts carry it
    assert load().verify.restart_timeout == 360  # first starts measured 219-252 s
