"""What the emulated vLLM versions accept in --kv-transfer-config.

The fields per release are kvceph's (deploys/upstream/vllm_kv_transfer.py, linked here as
vllm_kv_transfer.py). 0.26.0 is the release the Gaudi plugin validates; 0.33.0 dropped
kv_parallel_size, kv_rank, kv_ip and kv_buffer_size.
"""

from __future__ import annotations

from kvceph_lab_engine.vllm_kv_transfer import (
    FIELDS_026,
    FIELDS_033,
    KV_LOAD_FAILURE_POLICIES,
    KV_ROLES,
)

# 0.34.0: 0.33.0's fields, not read from its wheel here (kvceph renders none beyond them); the
# lab emulates it for LMCache MP mode (mp_client.py), whose connector both releases register.
KV_TRANSFER_FIELDS: dict[str, frozenset[str]] = {
    "0.26.0": FIELDS_026,
    "0.33.0": FIELDS_033,
    "0.34.0": FIELDS_033,
}
DEFAULT_VLLM_VERSION = "0.33.0"
# A patch release keeps its minor's config (kvceph's upgrade tests roll 0.33.0 -> 0.33.1):
# any 0.26.x / 0.33.x is emulated as its minor's .0 and reported as given (/version).
_MINORS = {v.rsplit(".", 1)[0]: v for v in KV_TRANSFER_FIELDS}


def emulated(version: str) -> str:
    """The KV_TRANSFER_FIELDS key that emulates ``version`` ('0.33.1' -> '0.33.0'); ValueError
    for a version of another minor."""
    parts = str(version).split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts) and ".".join(parts[:2]) in _MINORS:
        return _MINORS[".".join(parts[:2])]
    raise ValueError(f"unsupported --vllm-version {version!r}; known: 0.26.x, 0.33.x, 0.34.x")


# Connectors the emulation can stand in for. vLLM knows more (NixlConnector, ...), but the
# lab engine only emulates LMCache; anything else is refused like an unknown name.
SUPPORTED_CONNECTORS = ("LMCacheConnectorV1", "LMCacheMPConnector")
MP_CONNECTOR = "LMCacheMPConnector"
# vLLM 0.34's switch kvceph renders in MP mode (VMM memory cannot go over LMCache's CUDA IPC).
NO_EXTENSIBLE_KV_FLAG = "--no-enable-extensible-kv-cache"
NO_EXTENSIBLE_KV_FROM = "0.34.0"


class KVTransferError(ValueError):
    """The kv-transfer config would stop the emulated vLLM at startup."""


def check_kv_transfer(raw: str, vllm_version: str) -> dict:
    """Parse --kv-transfer-config like the emulated vLLM version; return the dict.

    Raises KVTransferError with the message vLLM prints.
    """
    import json

    try:
        fields = KV_TRANSFER_FIELDS[emulated(vllm_version)]
    except ValueError as exc:
        raise KVTransferError(str(exc)) from None
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KVTransferError(f"--kv-transfer-config is not valid JSON: {exc}") from exc
    if not isinstance(cfg, dict):
        raise KVTransferError("--kv-transfer-config must be a JSON object")
    allowed = fields
    extra = sorted(set(cfg) - allowed)
    if extra:
        raise KVTransferError(
            f"1 validation error for KVTransferConfig\n{extra[0]}\n"
            f"  Unexpected keyword argument [type=unexpected_keyword_argument, "
            f"input_value={cfg[extra[0]]!r}] (vLLM {vllm_version})"
        )
    role = cfg.get("kv_role")
    if role is None:
        raise KVTransferError(
            f"Please specify kv_role when kv_connector is set, supported roles are {list(KV_ROLES)}"
        )
    if role not in KV_ROLES:
        raise KVTransferError(f"Unsupported kv_role: {role}. Supported roles are {list(KV_ROLES)}")
    policy = cfg.get("kv_load_failure_policy", "fail")
    if policy not in KV_LOAD_FAILURE_POLICIES:
        raise KVTransferError(
            "1 validation error for KVTransferConfig\nkv_load_failure_policy\n"
            f"  Input should be 'fail' or 'recompute' [input_value={policy!r}]"
        )
    connector = cfg.get("kv_connector")
    if connector not in SUPPORTED_CONNECTORS:
        raise KVTransferError(f"Unsupported connector type: {connector}")
    return cfg
