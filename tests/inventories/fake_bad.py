# Inventories the preflight must refuse before touching any host; KVCEPH_FAKE_BAD picks one:
#   both          a host in gpu and gaudi
#   no_inference  no host in gpu or gaudi
#   two_admins    two hosts in ceph_admin
#   no_secrets    a good inventory, but no S3 keys (the test unsets them)
#   hf_token      an HF token in the inventory's host data
#   secret_env    a secret-looking name in kvceph_extra_env
#   secret_arg    --api-key=<key> in the engine profile's extra_args
#   typo          a misspelled kvceph_* key
#   secret_key    a secret-looking group_data key without the kvceph_ prefix (HF_TOKEN)
#   at_model      a model name with "@" (LMCache splits its keys on it)
#   long_context  kvceph_max_model_len over the model's native context
#   env_newline   a newline in a kvceph_extra_env value
#   env_devices   CUDA_VISIBLE_DEVICES in kvceph_extra_env on a host with engines
#   region_ini    a newline in kvceph_s3_region (it would add a line to the S3 INI files)
#   dtype_arg     --kv-cache-dtype=fp8 in extra_args (kvceph renders the flag itself)
#   pools_in_gpu  kvceph_ceph_pools on an inference host only (only ceph_admin reads it)
#   service_root  kvceph_service_user root (issue 49: one check per kind of value)
#   home_etc      kvceph_service_home /etc (chowned to the engine's user)
#   uid_collapse  an admin user that is a cache group's user
#   pip_option    a pip option among the profile's packages
#   quota_nan     kvceph_s3_quota_max_size_gb NaN on the Ceph admin host
#   vip_no_prefix an ingress VIP without its prefix, on every host (issue 49 item 3)
#   router_port   a router on gpu1 whose port is gpu1's engine's (item 6)
#   mon_port      a monitoring host scraping a mgr exporter on port 99999 (item 7)
#   retire_secret a secret key (AWS's example) passed as the key to retire (item 8)
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_bad = os.environ.get("KVCEPH_FAKE_BAD", "")
_saved = {k: os.environ.pop(k, None) for k in fake_facts.fake_env() if "_S3_" in k}
fake_facts.export_fake_credentials()  # the scripted answers are computed with the fake keys
_groups = fake_facts.inventory(fake_facts.Layout("fake_bad", converged=True))
if _bad == "no_secrets":
    for _key in _saved:
        del os.environ[_key]
ceph_admin = _groups["ceph_admin"]
rgw = _groups["rgw"]
gpu = _groups["gpu"]
gaudi = _groups["gaudi"]
if _bad == "both":
    gaudi = gaudi + gpu[:1]
elif _bad == "no_inference":
    gpu, gaudi = [], []
elif _bad == "two_admins":
    ceph_admin = ceph_admin + [("@fake/ceph2", dict(ceph_admin[0][1]))]
elif _bad == "hf_token":
    gpu = [(gpu[0][0], {**gpu[0][1], "kvceph_hf_token": "hf_fakeINVENTORYtoken0001"}), *gpu[1:]]
elif _bad == "secret_env":
    gpu = [
        (gpu[0][0], {**gpu[0][1], "kvceph_extra_env": {"HF_TOKEN": "hf_fakeEXTRAENVtoken0002"}}),
        *gpu[1:],
    ]


def _gpu1(**data):
    """gpu1 with ``data`` over its own."""
    return [(gpu[0][0], {**gpu[0][1], **data}), *gpu[1:]]


_profile = _groups["gpu"][0][1]["kvceph_engine_profile"]
_BAD = {
    "secret_arg": {
        "kvceph_engine_profile": {**_profile, "extra_args": ["--api-key=hf_fakeARGVkey0003"]}
    },
    "typo": {"kvceph_tensor_paralel_size": 4},
    "secret_key": {"HF_TOKEN": "hf_fakeGROUPDATAtoken0004"},
    "at_model": {"kvceph_model": "Qwen/Qwen3-32B@v2"},
    "long_context": {"kvceph_max_model_len": 131072},
    "env_newline": {"kvceph_extra_env": {"NCCL_DEBUG": "INFO\nVLLM_API_KEY=hf_fakeENVkey0005"}},
    "env_devices": {
        "kvceph_accelerator_count": 2,
        "kvceph_engines": [{"name": "a", "devices": [0, 1], "port": 8000}],
        "kvceph_extra_env": {"CUDA_VISIBLE_DEVICES": "0"},
    },
    "dtype_arg": {"kvceph_engine_profile": {**_profile, "extra_args": ["--kv-cache-dtype=fp8"]}},
    "pools_in_gpu": {"kvceph_ceph_pools": [{"name": "p", "pg_num": 8}]},
    "region_ini": {"kvceph_s3_region": "default\nendpoint_url = http://203.0.113.9"},
    "service_root": {"kvceph_service_user": "root"},
    "home_etc": {"kvceph_service_home": "/etc"},
    "uid_collapse": {"kvceph_s3_admin_user": "lmcache-gpu"},
    "pip_option": {
        "kvceph_engine_profile": {
            **_profile,
            "packages": ["--extra-index-url=http://203.0.113.9/simple", *_profile["packages"]],
        }
    },
}
if _bad in _BAD:
    gpu = _gpu1(**_BAD[_bad])
if _bad == "quota_nan":  # ceph1 is in ceph_admin and rgw: its data in both
    _nan = {"kvceph_s3_quota_max_size_gb": float("nan")}
    ceph_admin = [(n, {**d, **_nan}) for n, d in ceph_admin]
    rgw = [(n, {**d, **_nan}) if n == ceph_admin[0][0] else (n, d) for n, d in rgw]
if _bad == "vip_no_prefix":  # one ingress: the same VIP in every host's data
    _vip = {"kvceph_rgw_ingress_virtual_ip": "10.67.67.100"}
    ceph_admin, rgw, gpu, gaudi = (
        [(n, {**d, **_vip}) for n, d in g] for g in (ceph_admin, rgw, gpu, gaudi)
    )
if _bad == "router_port":
    router = [(gpu[0][0], {**gpu[0][1], "kvceph_router_port": 8000})]
if _bad == "mon_port":
    monitoring = [
        (ceph_admin[0][0], {**ceph_admin[0][1], "kvceph_ceph_mgr_exporters": ["ceph1:99999"]})
    ]
if _bad == "retire_secret":
    _retire = {
        "kvceph_rotation": "retire",
        "kvceph_retire_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    }
    gpu = _gpu1(**_retire)
