# Overrides for the H200 proof (inventory hw/h200/h200.py). Applied after the repository's
# group_data, like group_data/lab.py for the local lab.

# RGW and haproxy are started by hw/h200/ceph-up.sh (Pacific, no orchestrator on that machine):
# radosgw instances on 127.0.0.1:7481.. behind haproxy on 127.0.0.1:7480.
kvceph_rgw_managed_by = "external"
kvceph_rgw_dns_name = "s3.lab"
# A one-host loan lab: plain HTTP to its own RGW, allowed in a lab only.
kvceph_lab = True
kvceph_s3_endpoint = "http://s3.lab:7480"
kvceph_s3_endpoint_ip = "127.0.0.1"
kvceph_s3_admin_endpoint = "http://127.0.0.1:7480"
kvceph_verify_s3_endpoint = "http://127.0.0.1:7480"

# One H200, TP 1. No weights reach that machine: dummy weights of the Qwen3-32B shape (64 layers,
# 8 KV heads, head_dim 128, bf16: 262,144 bytes of KV per token) with a YaRN config for 131072.
kvceph_accelerator_count = 1
kvceph_tensor_parallel_size = 1
kvceph_model = "/opt/models/Qwen3-32B-shape"
kvceph_max_model_len = 131072
# 64 GB of weights + the KV of one 131072-token request (34 GB) on one 141 GB GPU.
kvceph_gpu_memory_utilization = 0.9
kvceph_engine_profile = {
    "name": "h200-vllm-0.26",
    "packages": ["vllm==0.26.0", "lmcache==0.5.6"],
    "executable": "vllm",
    "vllm_version": "0.26.0",
    "lmcache_version": "0.5.6",
    "extra_args": ["--load-format", "dummy", "--enforce-eager"],
}
# Loans 1-7 ran vLLM 0.26 and 0.33 with LMCache 0.5.6, pairs that load wrong KV into vLLM
# (deploys/engine/versions.py KV_LOAD_DEFECTS; dummy weights cannot show it): the harness still
# renders them, to repeat those runs and the defect itself (loan 7's real33).
kvceph_accept_kv_load_defect = True
kvceph_extra_env = {
    # the model's config.json declares 131072 through YaRN; vLLM still asks for this opt-in
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
    # /reset_prefix_cache: hw/h200/measure.py empties vLLM's GPU prefix cache between the cold and
    # the warm request instead of restarting the engine (the verifier itself restarts)
    "VLLM_SERVER_DEV_MODE": "1",
    "PYTHONUNBUFFERED": "1",
}
kvceph_health_timeout = 600

# LMCache's buffer and timeouts are derived by deploys/tier/kv_sizing.py from the model directory's
# config.json (hw/h200/model.py writes it) and kvceph_max_model_len: nothing to set here.
