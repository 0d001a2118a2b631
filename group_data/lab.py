# Overrides for the built-in local lab (inventories/lab.py). Applied after the per-group files.
import os

from deploys.settings.group_data import lab_ceph as _lab_ceph

# KVCEPH_LAB_INSTANCE=N: the Nth lab beside the others (lab/lab.sh): subnet 10.213.(7+N).0/24.
_INSTANCE = int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)
_CEPH1 = f"10.213.{7 + _INSTANCE}.11"
_LAB = os.environ.get("KVCEPH_LAB_DIR", f"/var/lib/kvceph-lab{_INSTANCE or ''}")

# A throwaway lab: plain-HTTP S3 (KVCEPH_LAB_S3_SCHEME=http) and the public hash seed are
# allowed here, refused on a fleet (deploys/settings, deploys/access/engine_users.py).
kvceph_lab = True

# Tiny pools: 2 memstore OSDs. The PG-budget refusal is tested by lowering mon_max_pg_per_osd.
kvceph_ceph_pools = [
    {"name": "default.rgw.buckets.data", "pg_num": 32, "size": 1, "min_size": 1},
    {"name": "default.rgw.buckets.index", "pg_num": 8, "size": 1, "min_size": 1},
]
kvceph_ceph_connect_timeout = 5
# Pacific has no orchestrator that applies specs without cephadm + containers: the lab's two
# radosgw instances and haproxy are started by the lab itself.
kvceph_rgw_managed_by = "external"
kvceph_rgw_dns_name = "s3.kvlab"
# The lab's haproxy serves S3 over https (:443, a certificate of the lab CA that lab/lab.sh
# makes) and http (:80). KVCEPH_LAB_S3_SCHEME=http runs the plain-HTTP variant.
_SCHEME = os.environ.get("KVCEPH_LAB_S3_SCHEME") or "https"
_PORT = {"https": 443, "http": 80}[_SCHEME]
kvceph_s3_endpoint = f"{_SCHEME}://s3.kvlab:{_PORT}"
kvceph_s3_endpoint_ip = _CEPH1
# The S3 admin writes run on ceph1, where haproxy listens on all addresses.
kvceph_s3_admin_endpoint = f"{_SCHEME}://127.0.0.1:{_PORT}"
kvceph_s3_quota_max_size_gb = 4
# verify.py runs on the controller, which reaches haproxy by address (path-style is fine there;
# the certificate names the address too).
kvceph_verify_s3_endpoint = f"{_SCHEME}://{_CEPH1}:{_PORT}"
# verify.py's measured figures (the crossover's source) stay with the lab, not in the checkout.
kvceph_measured_dir = f"{_LAB}/measured"
# Instance N>0 writes its reports (verify, probe, status) to reports/labN: `make test` runs two
# labs at once, and one lab's verify-latest.json must not be read as the other's.
kvceph_verify_report_dir = f"reports/lab{_INSTANCE}" if _INSTANCE else "reports"
if _SCHEME == "https":
    kvceph_s3_ca_bundle = f"{_LAB}/tls/ca.pem"


if _lab_ceph(_LAB) == "cephadm":
    # The cephadm lab (KVCEPH_LAB_CEPH=cephadm lab/lab.sh up): Ceph 20.2.4 managed by cephadm;
    # kvceph applies the RGW spec for real. 20.2.4 refuses the concentrator (the dry run says
    # so), so RGW gets cephadm's ingress: haproxy + keepalived on both rgw hosts (ceph1 and
    # rgw2, inventories/lab.py), one VIP each (cephadm makes ceph1 MASTER of .100, rgw2 of
    # .101, each the other's BACKUP). With `networks:` RGW binds only the hosts' lab addresses:
    # every S3 client uses a VIP.
    _VIP = f"10.213.{7 + _INSTANCE}.100"
    kvceph_rgw_managed_by = "cephadm"
    kvceph_rgw_networks = [f"10.213.{7 + _INSTANCE}.0/24"]
    # One radosgw per rgw host: two in all, as on the one-host lab before rgw2.
    kvceph_rgw_count_per_host = 1
    kvceph_rgw_frontend_port = 8080
    kvceph_rgw_concentrator = "haproxy"
    # A stopping radosgw drains for rgw_exit_timeout_secs (120 s), but 20.2.4's podman stops its
    # container after 10 s and SIGKILLs it: the daemon then reads `error`, not `stopped`
    # (test_11's intermittent failures). 5 s: every stop in the lab ends clean.
    kvceph_rgw_exit_timeout_secs = 5
    kvceph_rgw_ingress_virtual_ips = [f"{_VIP}/24", f"10.213.{7 + _INSTANCE}.101/24"]
    # The engines get both VIPs (kvceph_s3_endpoint_ips' default: every ingress VIP): two
    # /etc/hosts lines on every inference host, awscrt spreads over them
    # (tests/integration/test_15_rgw_ha.py stops rgw2's ingress under load).
    kvceph_s3_endpoint_ip = None  # all.py sets it: the VIPs are the default
    # One ingress frontend, in the lab's scheme: https on :443 terminates TLS in cephadm's
    # haproxy with the lab CA's certificate (it names the VIP); http on :80 without.
    kvceph_rgw_ingress_frontend_port = _PORT
    if _SCHEME == "https":
        kvceph_rgw_ingress_ssl_pem = f"{_LAB}/tls/s3.pem"
    kvceph_s3_admin_endpoint = f"{_SCHEME}://{_VIP}:{_PORT}"
    kvceph_verify_s3_endpoint = f"{_SCHEME}://{_VIP}:{_PORT}"

# No accelerators here: the lab engine stands in for vLLM + LMCache.
kvceph_accelerator_check = False
kvceph_engine_wheelhouse = f"{_LAB}/wheelhouse"
kvceph_router_wheelhouse = f"{_LAB}/wheelhouse/router"
# The lab's KV is small (lab/engine/README.md "Sizes and scaling"): 128 bytes per token for the
# whole "model" (64 per worker at TP 2, 128 on the TP 1 Gaudi host), loaded through a simulated
# S3 path of 2 MB/s per host. LMCache's buffer and timeouts are derived from these figures by
# the same code as in production (deploys/tier/kv_sizing.py); the conservative bandwidth is half the
# simulated one, as 0.7 GB/s is below the ~1.2 GB/s one radosgw delivered on the H200 host.
LAB_KV_BYTES_PER_TOKEN = 128
LAB_LOAD_BYTES_PER_S = 2_000_000
kvceph_kv_bytes_per_token = LAB_KV_BYTES_PER_TOKEN
kvceph_kv_load_gb_per_s = LAB_LOAD_BYTES_PER_S / 2 / 1e9
kvceph_prefill_tokens_per_s = 5000  # the lab engine's --prefill-ms-per-token 0.2
# The lab engine's DRAM tier loads 10x faster than its S3 path (lab/engine engine.py
# DRAM_SPEEDUP). At the default document a same-node repeat takes ~x0.04-0.05 of cold and an S3
# warm x0.37-0.42; at the 2048 tokens the tests use, a request's fixed cost (~20-40 ms on a
# 2-core machine) counts for more: DRAM x0.05-0.08 here and x0.11 on CI (2026-12-07: 0.056 s vs
# cold 0.500 s, a false failure at 0.1), S3 warm x0.38-0.58. 0.2 sits between the two at both.
kvceph_verify_dram_ratio = 0.2


def _lab_engine(name: str, vllm_version: str, bytes_per_token: int) -> dict:
    """The lab engine's profile emulating ``vllm_version``, ``bytes_per_token`` of KV per worker
    (inventories/lab.py's Gaudi host takes one too)."""
    return {
        "name": name,
        "packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"],
        "executable": "kvceph-lab-engine",
        "vllm_version": vllm_version,
        "lmcache_version": "0.5.6",
        # The lab engine's emulated device memory: two engines on one device fail to start, as
        # vLLM's do (lab/engine devices.py).
        "env": {"KVCEPH_LAB_DEVICE_LEDGER": "/dev/shm/kvceph-lab-devices"},
        "extra_args": [
            *("--vllm-version", vllm_version),
            *("--bytes-per-token", str(bytes_per_token)),
            *("--load-bytes-per-s", str(LAB_LOAD_BYTES_PER_S)),
        ],
    }


# The vLLM release the lab engine emulates and reports (/version), as the profile declares it:
# KVCEPH_LAB_VLLM_VERSION=0.33.1 or 0.26.0 is how the upgrade tests move a cache group.
_VLLM = os.environ.get("KVCEPH_LAB_VLLM_VERSION") or "0.33.0"
# TP 2: each worker holds half the lab model's KV.
kvceph_engine_profile = _lab_engine("lab-engine", _VLLM, LAB_KV_BYTES_PER_TOKEN // 2)
# KVCEPH_LAB_ENGINE_MODE=mp: the vllm-0.34-mp preset on the NVIDIA hosts, the lab engine
# emulating vLLM 0.34 + LMCacheMPConnector and lmcache-server.service running the lab's
# stand-in for `lmcache server` (lab/engine mp_server.py) with kvceph's plugin as its L2.
if os.environ.get("KVCEPH_LAB_ENGINE_MODE") == "mp":
    kvceph_engine_preset = "vllm-0.34-mp"
    kvceph_engine_profile = {
        **_lab_engine("lab-engine-mp", "0.34.0", LAB_KV_BYTES_PER_TOKEN // 2),
        "server_executable": "kvceph-lab-lmcache",
    }
kvceph_health_timeout = 60
# The lab engine starts in ~2 s: a crash loop reaches its start limit (5 starts) in ~20 s
# (tests/integration/test_16_restart.py).
kvceph_restart_delay = 2

# The lab's model (lab/model.sh makes it on the controller at `make lab-up`): mirrored once into
# Ceph and pulled by every inference host, which serves it from local disk; the lab engine reads
# its config and tokenizer there. The benchmark lab keeps the hub source: its Ansible peer
# (bench/ansible) writes the same files as kvceph's defaults.
LAB_MODEL_REVISION = "1ab0" * 10  # the lab model's "commit" (40 hex digits)
if not os.environ.get("KVCEPH_LAB_HOSTS"):
    kvceph_model_source = "mirror"
    kvceph_model_revision = LAB_MODEL_REVISION
    kvceph_model_mirror_from = f"{_LAB}/model"

# The engines listen on `::`, as `vllm serve --host ::` does: one dual-stack socket, so IPv4
# clients reach kvceph's gate as ::ffff:a.b.c.d: the deploy's readiness check on 127.0.0.1 and
# the controller (the lab bridge's .1), which stands for an operator's Prometheus network and
# reads /health and /metrics without the key; every other address needs it
# (tests/integration/test_06_security.py). The benchmark lab keeps kvceph's defaults.
if not os.environ.get("KVCEPH_LAB_HOSTS"):
    kvceph_vllm_bind = "::"
    # ceph1 and gaudi1 run the routers (inventories/lab.py), whose health checks carry no key.
    kvceph_vllm_open_networks = [
        f"10.213.{7 + _INSTANCE}.1/32",
        f"{_CEPH1}/32",
        f"10.213.{7 + _INSTANCE}.31/32",
    ]
