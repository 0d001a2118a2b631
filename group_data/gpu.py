# NVIDIA inference hosts: vLLM 0.33 + LMCache 0.5.6.
kvceph_gpu_memory_utilization = 0.55
# Qwen3-32B's native context; the seed's 131072 needs YaRN, which vLLM 0.33 has no flag for.
kvceph_max_model_len = 40960
