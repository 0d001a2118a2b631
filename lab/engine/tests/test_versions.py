"""kv-transfer-config acceptance per emulated vLLM version."""

import json

import pytest

from kvceph_lab_engine.versions import KV_TRANSFER_FIELDS, KVTransferError, check_kv_transfer

SEED = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both", "kv_parallel_size": "16"}
GOOD = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute"}  # fmt: skip


def test_seed_config_rejected_by_033_accepted_by_026():
    with pytest.raises(KVTransferError, match="Unexpected keyword argument"):
        check_kv_transfer(json.dumps(SEED), "0.33.0")
    assert check_kv_transfer(json.dumps(SEED), "0.26.0")["kv_parallel_size"] == "16"


@pytest.mark.parametrize("version", sorted(KV_TRANSFER_FIELDS))
def test_good_config_accepted(version):
    assert check_kv_transfer(json.dumps(GOOD), version) == GOOD


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"kv_connector": "LMCacheConnector", "kv_role": "kv_both"}, "Unsupported connector type"),
        ({"kv_connector": "LMCacheConnectorV1"}, "kv_role"),
        ({"kv_connector": "LMCacheConnectorV1", "kv_role": "both"}, "Unsupported kv_role"),
        ({**GOOD, "kv_load_failure_policy": "retry"}, "'fail' or 'recompute'"),
        ({**GOOD, "kv_ip": "1.2.3.4"}, "Unexpected keyword argument"),
    ],
)
def test_refusals_033(cfg, message):
    with pytest.raises(KVTransferError, match=message):
        check_kv_transfer(json.dumps(cfg), "0.33.0")


def test_not_json():
    with pytest.raises(KVTransferError, match="JSON"):
        check_kv_transfer("{kv_connector:", "0.33.0")
