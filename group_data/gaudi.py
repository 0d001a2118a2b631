# Intel Gaudi3 inference hosts: vllm-gaudi 0.26 (its validated vLLM) + LMCache 0.5.6, from a
# wheelhouse the operator provides (Habana's packages are not on PyPI).
kvceph_engine_wheelhouse = "wheelhouse/gaudi"
kvceph_extra_env = {"PT_HPU_GPU_MIGRATION": "1"}
