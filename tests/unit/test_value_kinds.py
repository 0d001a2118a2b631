"""Issue 49: bad values a new user would try, refused in one line (host, key, value, why, fix)
by the check of their kind (deploys/settings/kinds.py), and the look-alikes that stay accepted.
"""

# ruff: noqa: E501  (each refusal is the exact line an operator reads, kept whole)

from __future__ import annotations

import pytest

from deploys import settings as s
from deploys.cluster import capacity
from deploys.settings import kinds
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import Reader, SettingsError

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
MIRROR = {"kvceph_model_source": "mirror", "kvceph_model_revision": "a" * 40}

# fmt: off
HOST_REFUSALS = [
    pytest.param('gpu1', ('gpu',), {'kvceph_service_user': 'root'},
        "gpu1: kvceph_service_user = 'root': the engines would run as root, and the stage sets root's home and a nologin shell; fix: use an account of the engine's own, e.g. vllm",
        id='service_user_root'),
    pytest.param('gpu1', ('gpu',), {'kvceph_service_user': 'ubuntu', 'ssh_user': 'ubuntu'},
        "gpu1: kvceph_service_user = 'ubuntu': is the SSH login user (ssh_user): the stage sets its home and a nologin shell, locking that login out of SSH; fix: use an account of the engine's own, e.g. vllm",
        id='service_user_login'),
    pytest.param('gpu1', ('gpu',), {'kvceph_service_home': '/etc'},
        "gpu1: kvceph_service_home = '/etc': is a system directory, and kvceph chowns it to the engine's user and makes it writable in the unit; fix: use a directory of kvceph's own below it, e.g. /var/lib/vllm",
        id='home_etc'),
    pytest.param('gpu1', ('gpu',), {'kvceph_service_home': '/var/lib'},
        "gpu1: kvceph_service_home = '/var/lib': is a system directory, and kvceph chowns it to the engine's user and makes it writable in the unit; fix: use a directory of kvceph's own below it, e.g. /var/lib/vllm",
        id='home_var_lib'),
    pytest.param('gpu1', ('gpu',), {'kvceph_service_home': '/usr/local/vllm'},
        "gpu1: kvceph_service_home = '/usr/local/vllm': lies under /usr, and kvceph chowns it to the engine's user and makes it writable in the unit (a root escalation for the engine); fix: use a directory outside the system's trees, e.g. /var/lib/vllm",
        id='home_under_usr'),
    pytest.param('gpu1', ('gpu',), {'kvceph_hf_home': '/usr'},
        "gpu1: kvceph_hf_home = '/usr': is a system directory, and kvceph chowns it to the engine's user and makes it writable in the unit; fix: use a directory of kvceph's own below it, e.g. /data/hf",
        id='hf_home_usr'),
    pytest.param('gpu1', ('gpu',), {'kvceph_hf_home': '/root/hf'},
        "gpu1: kvceph_hf_home = '/root/hf': lies under /root, and kvceph chowns it to the engine's user and makes it writable in the unit (a root escalation for the engine); fix: use a directory outside the system's trees, e.g. /data/hf",
        id='hf_home_root'),
    pytest.param('gpu1', ('gpu',), {'kvceph_lmcache_connector': 'kvceph', 'kvceph_connector_receive_dir': '/etc/kv'},
        "gpu1: kvceph_connector_receive_dir = '/etc/kv': lies under /etc, and the engine writes into it (ReadWritePaths) (a root escalation for the engine); fix: use a directory outside the system's trees, e.g. /dev/shm",
        id='receive_dir_etc'),
    pytest.param('gpu1', ('gpu',), {'kvceph_venv': '/opt/kvceph/venv/'},
        "gpu1: kvceph_venv = '/opt/kvceph/venv/': ends with '/'; fix: write it without the trailing '/' (/opt/kvceph/venv)",
        id='venv_slash'),
    pytest.param('gpu1', ('gpu',), {'kvceph_venv': '/opt'},
        "gpu1: kvceph_venv = '/opt': is a system directory, and kvceph creates it and sets its mode; fix: use a directory of kvceph's own below it, e.g. /opt/kvceph/venv",
        id='venv_opt'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_profile': {'name': 'a/b'}},
        "gpu1: kvceph_engine_profile.name = 'a/b': is not a name kvceph can put into a label or path (letters, digits, '_', '.', '-'; a letter or digit first); fix: use e.g. vllm",
        id='profile_slash'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_profile': {'name': '..'}},
        "gpu1: kvceph_engine_profile.name = '..': is not a name kvceph can put into a label or path (letters, digits, '_', '.', '-'; a letter or digit first); fix: use e.g. vllm",
        id='profile_dotdot'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_profile': {'name': 'x\ny'}},
        "gpu1: kvceph_engine_profile.name = 'x\\ny': is not a name kvceph can put into a label or path (letters, digits, '_', '.', '-'; a letter or digit first); fix: use e.g. vllm",
        id='profile_newline'),
    pytest.param('gpu1', ('gpu',), {'kvceph_s3_user': '..'},
        "gpu1: kvceph_s3_user = '..': is not an RGW uid (a letter or digit first, then letters, digits, '_', '.', '-'); fix: use e.g. kvceph-s3-admin",
        id='uid_dotdot'),
    pytest.param('gpu1', ('gpu',), {'kvceph_s3_user': 'uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu'},
        "gpu1: kvceph_s3_user = 'uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu': is 65 characters; kvceph's RGW uids (also <kvceph_s3_user>-<group>) take at most 64; fix: use a shorter uid",
        id='uid_long'),
    pytest.param('gpu1', ('gpu',), {'kvceph_s3_admin_user': 'a\nb'},
        "gpu1: kvceph_s3_admin_user = 'a\\nb': holds a control character (a newline?); fix: write it on one line",
        id='uid_newline'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_rgw_ingress_virtual_ip': '10.67.67.100'},
        "ceph1: kvceph_rgw_ingress_virtual_ip = '10.67.67.100': has no prefix (cephadm picks the interface from the VIP's subnet); fix: use e.g. 10.67.67.100/24",
        id='vip_no_prefix'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_rgw_ingress_virtual_ip': '10.67.67.0/24'},
        "ceph1: kvceph_rgw_ingress_virtual_ip = '10.67.67.0/24': is the network or broadcast address of 10.67.67.0/24, not a host address; fix: use e.g. 10.67.67.100/24",
        id='vip_network'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_rgw_ingress_virtual_ip': '10.67.67.255/24'},
        "ceph1: kvceph_rgw_ingress_virtual_ip = '10.67.67.255/24': is the network or broadcast address of 10.67.67.0/24, not a host address; fix: use e.g. 10.67.67.100/24",
        id='vip_broadcast'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_rgw_ingress_virtual_ips': ['10.67.67.100/24', '10.67.67.101/16']},
        "ceph1: kvceph_rgw_ingress_virtual_ips = ['10.67.67.100/24', '10.67.67.101/16']: mixes prefixes (each VIP's subnet picks its interface); fix: give every VIP its subnet's prefix, e.g. /24",
        id='vip_mixed_prefix'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_s3_quota_max_size_gb': float("nan")},
        'ceph1: kvceph_s3_quota_max_size_gb = nan: is not a finite number: a size in GiB > 0 is; fix: use e.g. 2048',
        id='quota_nan'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_s3_quota_max_size_gb': float("inf")},
        'ceph1: kvceph_s3_quota_max_size_gb = inf: is not a finite number: a size in GiB > 0 is; fix: use e.g. 2048',
        id='quota_inf'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_s3_quota_max_size_gb': 1e-12},
        'ceph1: kvceph_s3_quota_max_size_gb = 1e-12: is below 1 MiB: it rounds to a size that holds nothing; fix: use e.g. 2048',
        id='quota_tiny'),
    pytest.param('ceph1', ('ceph_admin',), {'kvceph_s3_quota_max_size_gb': 1000000000000},
        'ceph1: kvceph_s3_quota_max_size_gb = 1000000000000: is above 8.58993e+09 GiB, more than radosgw-admin --max-size takes (int64 bytes); fix: use e.g. 2048',
        id='quota_huge'),
    pytest.param('gpu1', ('gpu',), {'kvceph_lmcache_max_local_cpu_size': float("nan")},
        'gpu1: kvceph_lmcache_max_local_cpu_size = nan: is not a finite number: a size in GiB > 0 is; fix: use e.g. 6.25 (GiB), or None',
        id='cpu_nan'),
    pytest.param('gpu1', ('gpu',), {'kvceph_lmcache_max_local_cpu_size': float("inf")},
        'gpu1: kvceph_lmcache_max_local_cpu_size = inf: is not a finite number: a size in GiB > 0 is; fix: use e.g. 6.25 (GiB), or None',
        id='cpu_inf'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_profile': {'packages': ['--extra-index-url=http://203.0.113.9/simple', 'vllm==0.25.1', 'lmcache==0.5.6']}},
        "gpu1: kvceph_engine_profile.packages = '--extra-index-url=http://203.0.113.9/simple': is a pip option, not a package (pip would take it as an argument); fix: list name==version pins only; an index goes in kvceph_engine_index_url, local wheels in kvceph_engine_wheelhouse",
        id='pkg_option'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_profile': {'packages': ['vllm @ http://203.0.113.9/vllm.whl', 'lmcache==0.5.6']}},
        "gpu1: kvceph_engine_profile.packages = 'vllm @ http://203.0.113.9/vllm.whl': is a direct URL or path, not a pinned package (nothing locks or checks it); fix: list name==version pins only; an index goes in kvceph_engine_index_url, local wheels in kvceph_engine_wheelhouse",
        id='pkg_url'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_profile': {'packages': ['vllm>=0.25', 'lmcache==0.5.6']}},
        "gpu1: kvceph_engine_profile.packages = 'vllm>=0.25': is not pinned as name==version (a range installs whatever pip picks); fix: list name==version pins only; an index goes in kvceph_engine_index_url, local wheels in kvceph_engine_wheelhouse",
        id='pkg_range'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_profile': {'packages': ['vllm==0.26.0', 'lmcache==0.5.6']}},
        "gpu1: kvceph_engine_profile.packages = 'vllm==0.26.0': differs from the profile's vllm_version '0.25.1' (the checks before the deploy read the label, pip would install the pin); fix: set vllm_version '0.26.0', or pin vllm==0.25.1",
        id='pkg_label'),
    pytest.param('gpu1', ('gpu',), {'kvceph_engine_index_url': 'https://pypi.org/simple extra'},
        "gpu1: kvceph_engine_index_url = 'https://pypi.org/simple extra': holds whitespace (pip would take the rest as another argument); fix: use e.g. https://pypi.org/simple",
        id='index_space'),
    pytest.param('r', ('router',), {'kvceph_router_bind': 'abc'},
        "r: kvceph_router_bind = 'abc': is not an IP address; fix: use e.g. 0.0.0.0 or ::",
        id='bind_abc'),
    pytest.param('r', ('router',), {'kvceph_router_bind': '1.2.3.4.5'},
        "r: kvceph_router_bind = '1.2.3.4.5': is not an IP address; fix: use e.g. 0.0.0.0 or ::",
        id='bind_five'),
    pytest.param('r', ('router',), {'kvceph_router_bind': '::::'},
        "r: kvceph_router_bind = '::::': is not an IP address; fix: use e.g. 0.0.0.0 or ::",
        id='bind_colons'),
    pytest.param('r', ('router',), {'kvceph_router_ports': {'a\nb': 8100}},
        "r: kvceph_router_ports = 'a\\nb': is not a served model's name (one line); fix: use the model name the engines serve, e.g. 'Qwen/Qwen3-32B'",
        id='route_newline'),
    pytest.param('r', ('router', 'gpu'), {'kvceph_router_port': 8000},
        "r: kvceph_router_port = 8000: is also kvceph_engines vllm's port on this host: the second listener would fail to start; fix: give each listener of the host its own port",
        id='route_engine_port'),
    pytest.param('r', ('router', 'gpu'), {'kvceph_vllm_port': 9100},
        "r: kvceph_router_port's metrics (port + 1000) = 9100: is also kvceph_engines vllm's port on this host: the second listener would fail to start; fix: give each listener of the host its own port",
        id='route_metrics_engine_port'),
    pytest.param('p', ('monitoring',), {'kvceph_ceph_mgr_exporters': ['ceph1:0']},
        "p: kvceph_ceph_mgr_exporters = 'ceph1:0': has no port 1..65535; fix: use e.g. 'ceph1:9283'",
        id='exporter_0'),
    pytest.param('p', ('monitoring',), {'kvceph_ceph_mgr_exporters': ['ceph1:99999']},
        "p: kvceph_ceph_mgr_exporters = 'ceph1:99999': has no port 1..65535; fix: use e.g. 'ceph1:9283'",
        id='exporter_99999'),
    pytest.param('p', ('monitoring',), {'kvceph_prometheus_scrape_interval': '0s'},
        "p: kvceph_prometheus_scrape_interval = '0s': is below 1s (Prometheus would scrape the exporters in a loop); fix: use e.g. 30s",
        id='scrape_0s'),
    pytest.param('p', ('monitoring',), {'kvceph_prometheus_scrape_interval': '1ms'},
        "p: kvceph_prometheus_scrape_interval = '1ms': is below 1s (Prometheus would scrape the exporters in a loop); fix: use e.g. 30s",
        id='scrape_1ms'),
    pytest.param('p', ('monitoring',), {'kvceph_prometheus_scrape_interval': '300000y'},
        "p: kvceph_prometheus_scrape_interval = '300000y': is out of range for Prometheus (promtool refuses it: over 292 years); fix: use e.g. 30s",
        id='scrape_range'),
    pytest.param('p', ('monitoring',), {'kvceph_prometheus_dir': '/etc'},
        "p: kvceph_prometheus_dir = '/etc': is a system directory, and kvceph creates it and sets its mode; fix: use a directory of kvceph's own below it, e.g. /etc/prometheus/kvceph",
        id='prometheus_etc'),
    pytest.param('gpu1', ('gpu',), {'kvceph_s3_user_display_name': 'LMCache\nx'},
        "gpu1: kvceph_s3_user_display_name = 'LMCache\\nx': holds a control character (a newline?); fix: write it on one line",
        id='display_newline'),
    pytest.param('gpu1', ('gpu',), {'kvceph_s3_lifecycle_rule_id': 'a\nb'},
        "gpu1: kvceph_s3_lifecycle_rule_id = 'a\\nb': holds a control character (a newline?); fix: write it on one line",
        id='rule_newline'),
]
# fmt: on


@pytest.mark.parametrize(("host", "groups", "data", "line"), HOST_REFUSALS)
def test_a_bad_value_is_refused_in_one_line_by_its_kind(host, groups, data, line):
    with pytest.raises(SettingsError) as caught:
        s.load({**BASE, **data}, host, groups)
    assert str(caught.value) == line


@pytest.mark.parametrize(
    ("host", "groups", "data"),
    [
        ("gpu1", ("gpu",), {"kvceph_service_user": "vllm", "ssh_user": "ubuntu"}),
        ("gpu1", ("gpu",), {"kvceph_service_home": "/var/lib/vllm"}),
        ("gpu1", ("gpu",), {"kvceph_service_home": "/home/vllm"}),
        ("gpu1", ("gpu",), {"kvceph_hf_home": "/data/hf"}),
        ("gpu1", ("gpu",), {"kvceph_lmcache_connector": "kvceph",
                            "kvceph_connector_receive_dir": "/dev/shm"}),
        ("gpu1", ("gpu",), {"kvceph_lmcache_connector": "kvceph",
                            "kvceph_connector_receive_dir": "/dev/shm/kvceph"}),
        ("gpu1", ("gpu",), {"kvceph_venv": "/opt/kvceph/venv"}),
        ("gpu1", ("gpu",), {"kvceph_venv": "/usr/local/kvceph/venv"}),  # root's, not the engine's
        ("gpu1", ("gpu",), {"kvceph_engine_profile": {"name": "vllm-0.25.1_b"}}),
        ("gpu1", ("gpu",), {"kvceph_s3_user": "lm.cache_1", "kvceph_s3_admin_user": "a" * 64}),
        ("gpu1", ("gpu",), {"kvceph_lmcache_max_local_cpu_size": 6.25}),
        ("gpu1", ("gpu",), {"kvceph_engine_profile": {
            "packages": ["vllm==0.25.1", "lmcache==0.5.6", "nixl==0.4.1"]}}),
        ("gpu1", ("gpu",), {"kvceph_engine_index_url": "http://10.0.0.9:8080/simple/"}),
        ("gpu1", ("gpu",), {"kvceph_s3_user_display_name": "LMCache KV cache"}),
        ("ceph1", ("ceph_admin",), {"kvceph_s3_quota_max_size_gb": 0.5}),
        ("ceph1", ("ceph_admin",), {"kvceph_s3_quota_max_size_gb": 8 * 1024 * 1024}),
        ("ceph1", ("ceph_admin",), {"kvceph_rgw_ingress_virtual_ip": "10.67.67.100/24"}),
        ("ceph1", ("ceph_admin",), {"kvceph_rgw_ingress_virtual_ip": "10.67.67.100/32"}),
        ("ceph1", ("ceph_admin",), {"kvceph_rgw_ingress_virtual_ips": ["10.67.67.100/24",
                                                                        "10.67.67.101/24"]}),
        ("r", ("router",), {"kvceph_router_bind": "::"}),
        ("r", ("router",), {"kvceph_router_bind": "10.0.0.7"}),
        ("r", ("router", "gpu"), {"kvceph_router_port": 8100, "kvceph_vllm_port": 8000}),
        ("p", ("monitoring",), {"kvceph_ceph_mgr_exporters": ["ceph1:9283", "[::1]:65535"]}),
        ("p", ("monitoring",), {"kvceph_prometheus_scrape_interval": "1s"}),
        ("p", ("monitoring",), {"kvceph_prometheus_scrape_interval": "1m30s"}),
        ("p", ("monitoring",), {"kvceph_prometheus_scrape_interval": "1d"}),
        ("p", ("monitoring",), {"kvceph_prometheus_dir": "/etc/prometheus/kvceph"}),
    ],
)  # fmt: skip
def test_the_look_alikes_stay_accepted(host, groups, data):
    assert s.load({**BASE, **data}, host, groups).host == host


def test_every_path_key_says_how_kvceph_uses_its_directory():
    # The next path setting cannot ship unclassified: the getter refuses it.
    with pytest.raises(KeyError, match="kvceph_new_dir: a path setting missing"):
        Reader({"kvceph_new_dir": "/var/lib/x"}, "gpu1").path("kvceph_new_dir")
    assert set(kinds.PATH_USE.values()) == {kinds.CHOWNED, kinds.WRITTEN, kinds.INSTALLED}


def test_promtools_range_is_the_bound():
    assert kinds.duration_ms("292y") is not None and kinds.duration_problem("292y", 1000) is None
    assert "out of range" in kinds.duration_problem("293y", 1000)
    assert kinds.duration_ms("1h1h") is None and kinds.duration_ms("") is None


# --- the fleet: RGW identities, VIPs, the quota -----------------------------------------------


def _fleet(admin: dict, gpu: dict, gpu2: dict | None = None) -> None:
    hosts = [
        s.load({**BASE, **admin}, "ceph1", ("ceph_admin",)),
        s.load({**BASE, **gpu}, "gpu1", ("gpu",)),
    ]
    if gpu2 is not None:
        hosts.append(s.load({**BASE, **gpu2}, "gpu2", ("gpu",)))
    check_inventory(hosts)


SPLIT = (
    ": one RGW user in two roles holds both keys and undoes the least-privilege split; fix: "
    "give each RGW identity its own uid"
)


@pytest.mark.parametrize(
    ("admin", "gpu", "line"),
    [
        (
            {"kvceph_s3_admin_user": "lmcache"},
            {"kvceph_s3_admin_user": "lmcache"},
            "ceph1: kvceph_s3_user = 'lmcache': is also the admin (bucket owner) on ceph1 "
            "(kvceph_s3_admin_user), here the legacy engine user" + SPLIT,
        ),
        (
            {"kvceph_s3_admin_user": "lmcache-qwen3-32b-tp2"},
            {"kvceph_s3_admin_user": "lmcache-qwen3-32b-tp2"},
            "gpu1: kvceph_s3_user + kvceph_cache_group = 'lmcache-qwen3-32b-tp2': is also the "
            "admin (bucket owner) on ceph1 (kvceph_s3_admin_user), here cache group "
            "qwen3-32b-tp2's user" + SPLIT,
        ),
        (  # an engine user plus a group name composes the admin's name
            {},
            {"kvceph_s3_user": "kvceph-s3", "kvceph_cache_group": "admin"},
            "gpu1: kvceph_s3_user + kvceph_cache_group = 'kvceph-s3-admin': is also the admin "
            "(bucket owner) on ceph1 (kvceph_s3_admin_user), here cache group admin's user" + SPLIT,
        ),
        (
            {},
            {**MIRROR, "kvceph_model_mirror_reader": "kvceph-s3-admin"},
            "gpu1: kvceph_model_mirror_reader = 'kvceph-s3-admin': is also the admin (bucket "
            "owner) on ceph1 (kvceph_s3_admin_user), here the model mirror's reader" + SPLIT,
        ),
        (
            {},
            {**MIRROR, "kvceph_model_mirror_owner": "lmcache-qwen3-32b-tp2"},
            "gpu1: kvceph_model_mirror_owner = 'lmcache-qwen3-32b-tp2': is also cache group "
            "qwen3-32b-tp2's user on gpu1 (kvceph_s3_user + kvceph_cache_group), here the model "
            "mirror's owner" + SPLIT,
        ),
        (
            {},
            {"kvceph_s3_user": "l" * 40, "kvceph_cache_group": "g" * 30},
            f"gpu1: kvceph_s3_user + kvceph_cache_group = '{'l' * 40}-{'g' * 30}': is 71 "
            "characters; kvceph's RGW uids (also <kvceph_s3_user>-<group>) take at most 64; "
            "fix: use a shorter uid",
        ),
    ],
)
def test_rgw_identities_that_collapse_are_refused(admin, gpu, line):
    with pytest.raises(SettingsError) as caught:
        _fleet(admin, gpu)
    assert str(caught.value) == line


def test_distinct_identities_pass_the_mirror_included():
    _fleet({}, {**MIRROR})
    _fleet({}, {"kvceph_s3_user": "l" * 32, "kvceph_cache_group": "g" * 31})  # 64: the bound


def test_hosts_that_disagree_on_the_vips_are_refused():
    vip = {"kvceph_rgw_ingress_virtual_ip": "10.67.67.100/24"}
    other = {"kvceph_rgw_ingress_virtual_ip": "10.67.67.101/24"}
    with pytest.raises(SettingsError) as caught:
        _fleet(vip, vip, other)
    assert str(caught.value) == (
        "gpu2: kvceph_rgw_ingress_virtual_ips = ('10.67.67.101/24',) differs from ceph1's "
        "('10.67.67.100/24',): the cluster has one ingress (its spec on the admin host, the "
        "engines' addresses); fix: set the VIPs once, in group_data/all.py"
    )
    _fleet(vip, vip, vip)


def test_a_quota_given_on_an_inference_host_only_is_refused():
    with pytest.raises(SettingsError) as caught:
        _fleet({}, {"kvceph_s3_quota_max_size_gb": 2})
    assert str(caught.value) == (
        "gpu1: kvceph_s3_quota_max_size_gb is set where it has no effect (it acts on ceph1 "
        "(ceph_admin) only): it would be ignored and never checked; fix: set it in the "
        "group_data of the hosts it acts on (or all.py)"
    )
    _fleet({"kvceph_s3_quota_max_size_gb": 2}, {"kvceph_s3_quota_max_size_gb": 2})  # all.py


def test_a_quota_below_the_fleets_dram_buffers_is_warned_on_every_plan():
    ceph1 = s.load({**BASE, "kvceph_s3_quota_max_size_gb": 20}, "ceph1", ("ceph_admin",))
    gpu = s.load(BASE, "gpu1", ("gpu",))  # Qwen3-32B TP 2: 2 x 6.25 GiB per engine
    quota, line = capacity.plan(ceph1, [ceph1, gpu, gpu], None, None)
    assert line.endswith(
        "; WARNING: kvceph_s3_quota_max_size_gb = 20.0: 20.0 GiB is below the 25.0 GiB the "
        "fleet's DRAM buffers hold (kvceph_lmcache_max_local_cpu_size x workers x engines): "
        "the S3 tier holds less than the caches in front of it; fix: give at least 25.0 GiB"
    )
    ceph1 = s.load({**BASE, "kvceph_s3_quota_max_size_gb": 25}, "ceph1", ("ceph_admin",))
    quota, line = capacity.plan(ceph1, [ceph1, gpu, gpu], None, None)
    assert quota.max_size == 25 * (1 << 30) and "WARNING" not in line


def test_a_vip_that_is_an_rgw_hosts_own_address_is_refused():
    from deploys.preflight import check_ingress_hosts

    me = s.load({**BASE, "kvceph_rgw_ingress_virtual_ip": "10.67.67.11/24"}, "ceph1",
                ("ceph_admin", "rgw"))  # fmt: skip
    with pytest.raises(SettingsError) as caught:
        check_ingress_hosts({"ceph1": me}, ["10.67.67.11", "10.67.67.12"])
    assert str(caught.value) == (
        "ceph1: kvceph_rgw_ingress_virtual_ip = '10.67.67.11/24': is an rgw host's own "
        "address; fix: use a free address of the rgw hosts' subnet as the VIP"
    )
    check_ingress_hosts({"ceph1": me}, ["10.67.67.12", "10.67.67.13"])


# --- item 8: look-alikes of settings, and what has no effect ---------------------------------


def test_an_lmcache_variable_over_a_rendered_field_is_refused():
    with pytest.raises(SettingsError) as caught:
        s.load({**BASE, "kvceph_extra_env": {"LMCACHE_CHUNK_SIZE": "16"}}, "gpu1", ("gpu",))
    assert str(caught.value) == (
        "gpu1: kvceph_extra_env = 'LMCACHE_CHUNK_SIZE': overrides chunk_size of the lmcache.yaml "
        "kvceph renders and sizes (LMCache reads LMCACHE_<FIELD> over the file); fix: remove "
        "it; set the field through its kvceph_lmcache_* setting (docs/settings.md)"
    )
    # LMCache's own logging is no config field: it passes.
    s.load({**BASE, "kvceph_extra_env": {"LMCACHE_LOG_LEVEL": "DEBUG"}}, "gpu1", ("gpu",))


@pytest.mark.parametrize("connector", ["lmcache", "kvceph"])
def test_the_refused_lmcache_variables_are_the_fields_kvceph_renders(connector):
    from deploys import render
    from deploys.settings import engine_env

    me = s.load({**BASE, "kvceph_lmcache_connector": connector}, "gpu1", ("gpu",))
    assert set(render.lmcache_config(me)) <= set(engine_env.LMCACHE_RENDERED)


def test_crc32c_with_the_stock_connector_has_no_effect_and_is_refused():
    data = {**BASE, "kvceph_connector_verify_crc32c": True}
    with pytest.raises(SettingsError) as caught:
        s.load({**data, "kvceph_lmcache_connector": "lmcache"}, "gpu1", ("gpu",))
    assert str(caught.value) == (
        "gpu1: kvceph_connector_verify_crc32c = True: is a setting of kvceph's connector, not "
        "'lmcache' (the stock one checks no GET body: the setting would do nothing); fix: set "
        "kvceph_lmcache_connector: kvceph, or drop kvceph_connector_verify_crc32c"
    )
    assert s.load({**data, "kvceph_lmcache_connector": "kvceph"}, "gpu1", ("gpu",)).lmcache


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"kvceph_prefill_tokens_per_s": float("inf")},
            "gpu1: kvceph_prefill_tokens_per_s = inf: must be a rate > 0 or {tokens: rate}; fix: "
            "use e.g. {16384: 4100, 131072: 2440} (cold prompt tokens / TTFT at two lengths)",
        ),
        (
            {"kvceph_connector_timeout_s": float("nan")},
            "gpu1: kvceph_connector_timeout_s = nan: must be a number in [0.1, 600]; fix: use "
            "e.g. 5.0",
        ),
    ],
)
def test_non_finite_numbers_elsewhere_are_refused_too(data, line):
    with pytest.raises(SettingsError) as caught:
        s.load({**BASE, **data}, "gpu1", ("gpu",))
    assert str(caught.value) == line


def test_a_monitoring_key_without_a_monitoring_host_is_refused():
    data = {"kvceph_prometheus_dir": "/etc/prometheus/x"}
    with pytest.raises(SettingsError) as caught:
        _fleet(data, data)
    assert str(caught.value) == (
        "ceph1, gpu1: kvceph_prometheus_dir is set but the inventory has no monitoring host, the "
        "only hosts that read it: it would be ignored and never checked; fix: add the "
        "monitoring host to the inventory, or remove the key"
    )
    hosts = [
        s.load({**BASE, **data}, "ceph1", ("ceph_admin", "monitoring")),
        s.load({**BASE, **data}, "gpu1", ("gpu",)),
    ]
    check_inventory(hosts)  # the monitoring host reads it


@pytest.mark.parametrize(
    "secret",
    [
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # AWS's documented example secret key
        "a1B2" * 10,  # base64 without / or +, mixed case
    ],
)
def test_a_retire_key_that_is_really_a_secret_is_refused_unshown(secret):
    data = {**BASE, "kvceph_rotation": "retire", "kvceph_retire_access_key": secret}
    with pytest.raises(SettingsError) as caught:
        s.load(data, "gpu1", ("gpu",))
    assert str(caught.value) == (
        "gpu1: kvceph_retire_access_key = '***': has the shape of a secret key (40 characters, "
        "mixed case), not of an access key id (upper case and digits); fix: pass --data "
        "kvceph_retire_access_key=<old access key> (never its secret)"
    )
    assert secret not in str(caught.value)


@pytest.mark.parametrize(
    "access_key",
    [
        "0555B35654AD1656D804",  # an RGW access key
        "AKIAIOSFODNN7EXAMPLE",  # AWS's documented example access key id
        "LABGPU" + "0123456789ABCDEF0123456789ABCDEF01",  # 40 characters, but upper case: an id
    ],
)
def test_a_real_access_key_id_is_accepted_for_retire(access_key):
    data = {**BASE, "kvceph_rotation": "retire", "kvceph_retire_access_key": access_key}
    assert s.load(data, "gpu1", ("gpu",)).run.retire_access_key == access_key


def test_a_pyinfra_password_committed_in_group_data_is_refused(tmp_path):
    from deploys.settings import group_data

    (tmp_path / "all.py").write_text("import os\nssh_password = os.environ['SSH_PW']\n")
    group_data.refuse_committed_secrets(tmp_path)  # from the environment: fine
    (tmp_path / "gpu.py").write_text("ssh_user = 'ubuntu'\nssh_password = 'hunter2'\n")
    with pytest.raises(SettingsError) as caught:
        group_data.refuse_committed_secrets(tmp_path)
    assert str(caught.value) == (
        "group_data/gpu.py: ssh_password = '***': a password in a committed file; fix: remove "
        "it; use SSH keys (an agent), or read it from the environment (os.environ[...]) in the "
        "inventory"
    )
    group_data.refuse_committed_secrets()  # the repository's own group_data holds none


def test_the_implicit_ssh_login_user_is_not_the_engines_account(tmp_path, monkeypatch):
    # pyinfra's SSH connector without ssh_user: ssh_config's User, else the local user.
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu1\n  User ops\nHost *\n  User deploy\n")
    data = {**BASE, "kvceph_service_user": "ops", "ssh_config_file": str(config)}
    with pytest.raises(SettingsError) as caught:
        s.load(data, "gpu1", ("gpu",))
    assert str(caught.value) == (
        "gpu1: kvceph_service_user = 'ops': is the SSH login user (ssh_user unset: pyinfra logs "
        "in as ops, from ~/.ssh/config or the local user): the stage sets its home and a nologin "
        "shell, locking that login out of SSH; fix: use an account of the engine's own, e.g. vllm"
    )
    assert s.load({**data, "ssh_user": "root"}, "gpu1", ("gpu",))  # an explicit login wins
    assert s.load(data, "gpu2", ("gpu",))  # gpu2 logs in as deploy
    monkeypatch.setattr("getpass.getuser", lambda: "vllm")
    bare = {**BASE, "ssh_config_file": str(tmp_path / "none")}
    with pytest.raises(SettingsError, match="pyinfra logs in as vllm"):
        s.load(bare, "gpu1", ("gpu",))  # the default service user is the local user
    assert s.load(bare, "@local", ("gpu",))  # no SSH login to lock out


@pytest.mark.parametrize(
    "text",
    [
        'gpu = (["gpu1"], {"ssh_user": "ubuntu", "ssh_password": "hunter2"})\n',  # group data
        'gpu = [("gpu1", {"_sudo_password": "hunter2"})]\n',  # host data
        'gpu = [("gpu1", dict(ssh_key_password="hunter2"))]\n',
    ],
)
def test_a_pyinfra_password_in_an_inventory_file_is_refused(tmp_path, text):
    from deploys.settings import group_data

    (tmp_path / "group_data").mkdir()
    inventories = tmp_path / "inventories"
    inventories.mkdir()
    (inventories / "site.py").write_text(
        'import os\nceph = [("ceph1", {"ssh_password": os.environ["SSH_PW"]})]\n'
    )
    group_data.refuse_committed_secrets(tmp_path / "group_data", inventories)  # environment: fine
    (inventories / "site.py").write_text(text)
    with pytest.raises(SettingsError) as caught:
        group_data.refuse_committed_secrets(tmp_path / "group_data", inventories)
    name = next(n for n in group_data.PYINFRA_SECRETS if n in text)
    assert str(caught.value) == (
        f"inventories/site.py: {name} = '***': a password in a committed file; fix: remove it; "
        "use SSH keys (an agent), or read it from the environment (os.environ[...]) in the "
        "inventory"
    )
    assert "hunter2" not in str(caught.value)


def _rgw_fleet(admin: dict, rgw2: dict) -> None:
    check_inventory(
        [
            s.load({**BASE, **admin}, "ceph1", ("ceph_admin", "rgw")),
            s.load({**BASE, **rgw2}, "rgw2", ("rgw", "router")),
            s.load(BASE, "gpu1", ("gpu",)),
        ]
    )


def test_the_admins_rgw_ports_are_checked_on_every_rgw_host():
    # cephadm places the admin's RGW spec on every rgw host: rgw2's router meets its ports
    # there, even where only the admin host's data sets them.
    with pytest.raises(SettingsError) as caught:
        _rgw_fleet({"kvceph_rgw_frontend_port": 8100}, {})
    assert str(caught.value) == (
        "rgw2: kvceph_rgw_frontend_port (the RGW spec, from ceph1) = 8100: is also "
        "kvceph_router_port on this host: the second listener would fail to start; fix: give "
        "each listener of the host its own port"
    )
    vip = {"kvceph_rgw_ingress_virtual_ip": "10.67.67.100/24"}
    with pytest.raises(SettingsError) as caught:
        _rgw_fleet({**vip, "kvceph_rgw_ingress_frontend_port": 9100}, vip)
    assert str(caught.value) == (
        "rgw2: kvceph_rgw_ingress_frontend_port (the RGW spec, from ceph1) = 9100: is also "
        "kvceph_router_port's metrics (port + 1000) on this host: the second listener would "
        "fail to start; fix: give each listener of the host its own port"
    )
    with pytest.raises(SettingsError) as caught:  # haproxy's monitor port, no setting of its own
        _rgw_fleet(vip, {**vip, "kvceph_router_port": 1967})
    assert str(caught.value) == (
        "rgw2: the ingress's haproxy monitor port (kvceph's) = 1967: is also kvceph_router_port "
        "on this host: the second listener would fail to start; fix: give each listener of the "
        "host its own port"
    )
    _rgw_fleet({"kvceph_rgw_frontend_port": 8080}, {})  # distinct: accepted
