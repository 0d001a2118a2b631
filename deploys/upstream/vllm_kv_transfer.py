"""What vLLM's ``--kv-transfer-config`` accepts, per minor release (stdlib only).

Source: vLLM KVTransferConfig (vllm/config/kv_transfer.py, a pydantic dataclass with
extra="forbid"), checked with each release's own CLI parser (parsing only) on 2026-11-29, see
docs/procedure.md ("vLLM arguments"). kvceph renders no field outside its release's set
(deploys/engine/versions.py); the lab engine refuses one as vLLM does (lab/engine versions.py).
"""

from __future__ import annotations

KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
KV_LOAD_FAILURE_POLICIES = ("fail", "recompute")

FIELDS_033 = frozenset(
    {
        "kv_connector",
        "engine_id",
        "kv_buffer_device",
        "kv_role",
        "kv_port",
        "kv_connector_extra_config",
        "kv_connector_module_path",
        "enable_permute_local_kv",
        "kv_load_failure_policy",
    }
)
# 0.26 still has the P2P-era fields the seed uses (kv_parallel_size & co); 0.33.0 dropped them.
FIELDS_026 = FIELDS_033 | {"kv_parallel_size", "kv_rank", "kv_ip", "kv_buffer_size"}
