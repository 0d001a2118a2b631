"""What kvceph knows of the software it deploys, as that software computes it (stdlib only).

LMCache's object names and vLLM's kv-transfer fields, written once: the product reads them
(verify's object names, the rendered ``--kv-transfer-config``), and the lab engine, which
stands in for vLLM + LMCache, is built with the same files (its hashing.py, mp_keys.py and
vllm_kv_transfer.py are links to them, packed into its wheel as files).
"""
