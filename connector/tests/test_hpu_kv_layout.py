"""Gaudi's pair (vllm-gaudi 0.26 + LMCache 0.5.6 in-process): the connector class and the shapes.

LMCache 0.5.6 picks ``VLLMPagedMemHPUConnectorV2`` on HPU (lmcache/v1/gpu_connector/__init__.py
239-245; no layerwise connector there, 52-57). vllm-gaudi v0.26.0 registers the KV caches as
recorded below (docs/design.md "Gaudi's pair"): per layer a (K, V) tuple, each
``[num_blocks, block_size, kv_heads, head_size]``, the view ``get_kv_caches_4D`` makes of the
flat ``[(num_blocks + 1) * block_size, kv_heads, head_size]`` caches, its pad block dropped.

This runs LMCache's own ``from_gpu`` / ``to_gpu`` (hpu_connector.py 145-208, 86-143) on CPU
tensors of those shapes (habana_frameworks and torch.hpu stubbed: mark_step and synchronize
only) and checks what #4463 breaks on NVIDIA's packed K|V: every byte of K and V reaches the
chunk, in LMCache's KV_2LTD order, and comes back where it was.
"""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

# vllm-gaudi v0.26.0, recorded from its code (paths in docs/design.md "Gaudi's pair"):
# - attention/ops/hpu_paged_attn.py 72-78: get_kv_cache_shape -> (blocks * block_size, kv
#   heads, head size);
# - v1/worker/hpu_model_runner.py 6810-6843: key_cache and value_cache of that shape, with one
#   pad block (num_blocks + 1), kv_caches[layer] = (key, value, None, None) (bf16: no scales);
# - hpu_model_runner.py 6890-6891 registers get_kv_caches_4D(kv_caches), 6958-6978: each
#   cache viewed (-1, block_size, heads, head size), the pad block dropped, TensorTuple((K, V)).
# Qwen3-32B on one Gaudi (TP 1): 8 KV heads of 128; block size 128 (deploys/engine/versions.py).
KV_HEADS, HEAD_SIZE, BLOCK_SIZE = 8, 128, 128
LAYERS, BLOCKS = 3, 4  # few layers and blocks: the copy's shape, not the model's size


def flat_cache(seed: int) -> torch.Tensor:
    """One of vllm-gaudi's flat caches (its pad block included), filled with distinct values."""
    n = (BLOCKS + 1) * BLOCK_SIZE * KV_HEADS * HEAD_SIZE
    values = torch.arange(n, dtype=torch.float32) + seed * n
    return values.reshape((BLOCKS + 1) * BLOCK_SIZE, KV_HEADS, HEAD_SIZE)


def kv_caches_4d(layers) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """get_kv_caches_4D of (key, value, None, None) per layer, as LMCache's adapter lists it."""
    out = []
    for key, value in layers:
        pair = [c.view(-1, BLOCK_SIZE, *c.shape[1:])[:BLOCKS] for c in (key, value)]
        out.append(tuple(pair))
    return out


@pytest.fixture()
def hpu_connector(monkeypatch):
    """LMCache 0.5.6's VLLMPagedMemHPUConnectorV2, importable without Habana's stack."""
    core = types.SimpleNamespace(mark_step=lambda: None)
    habana = types.ModuleType("habana_frameworks")
    htorch = types.ModuleType("habana_frameworks.torch")
    htorch.core = core
    habana.torch = htorch
    monkeypatch.setitem(sys.modules, "habana_frameworks", habana)
    monkeypatch.setitem(sys.modules, "habana_frameworks.torch", htorch)
    monkeypatch.setattr(
        torch, "hpu", types.SimpleNamespace(synchronize=lambda: None), raising=False
    )
    monkeypatch.delitem(sys.modules, "lmcache.v1.gpu_connector.hpu_connector", raising=False)
    from lmcache.v1.gpu_connector import hpu_connector
    from lmcache.v1.gpu_connector.kv_format.detectors import vllm as detector

    # LMCache's vLLM detector takes a 5-D cache's middle axes as NHD unless the device is the
    # CPU (detectors/vllm.py 26-34, 107-111): on HPU, [2, NB, BS, NH, HS] as vllm-gaudi's.
    monkeypatch.setattr(detector, "torch_device_type", "hpu")

    return hpu_connector.VLLMPagedMemHPUConnectorV2


def attributes_on_cpu(conn, kvcaches) -> None:
    """What _initialize_attributes finds (LMCache's own discovery on its meta proxy), without
    its device assertion (the tensors are on CPU here)."""
    # The proxy _initialize_attributes builds (hpu_connector.py 287-302): [2, *K's shape].
    first = kvcaches[0][0]
    proxy = [torch.empty((2, *first.shape), dtype=first.dtype, device="meta") for _ in kvcaches]
    import lmcache.lmcache_native as lmcache_native
    from lmcache.utils import EngineType
    from lmcache.v1.gpu_connector import utils

    fmt, proxy = utils.normalize_kv_and_discover_format(proxy, EngineType.VLLM)
    assert fmt == lmcache_native.EngineKVFormat.NL_X_TWO_NB_BS_NH_HS, fmt
    conn.engine_kv_format = fmt
    conn.num_layers = utils.get_num_layers(proxy, fmt)
    conn.num_blocks = utils.get_num_blocks(proxy, fmt)
    conn.block_size = utils.get_block_size(proxy, fmt)
    conn.hidden_dim_size = utils.get_hidden_dim_size(proxy, fmt)
    conn.head_size = utils.get_head_size(proxy, fmt)
    conn.num_heads = utils.get_num_heads(proxy, fmt)
    conn.use_mla = False
    conn._attributes_initialized = True


def test_lmcache_copies_whole_k_and_v_rows_of_vllm_gaudis_caches(hpu_connector):
    from lmcache.v1.memory_management import MemoryFormat

    layers = [(flat_cache(2 * i), flat_cache(2 * i + 1)) for i in range(LAYERS)]
    kvcaches = kv_caches_4d(layers)
    conn = hpu_connector()
    attributes_on_cpu(conn, kvcaches)
    # LMCache's discovery of vllm-gaudi's proxy: the split layout, full rows of heads x size.
    assert (conn.num_layers, conn.num_blocks, conn.block_size) == (LAYERS, BLOCKS, BLOCK_SIZE)
    assert (conn.num_heads, conn.head_size) == (KV_HEADS, HEAD_SIZE)
    assert conn.hidden_dim_size == KV_HEADS * HEAD_SIZE

    tokens = 256  # one chunk, two blocks, out of order (a paged cache's slots)
    slots = torch.cat([torch.arange(2 * 128, 3 * 128), torch.arange(0, 128)])
    shape = conn.get_shape(tokens)
    assert tuple(shape) == (2, LAYERS, tokens, KV_HEADS * HEAD_SIZE)  # KV_2LTD
    chunk = types.SimpleNamespace(
        tensor=torch.zeros(shape), metadata=types.SimpleNamespace(fmt=MemoryFormat.KV_2LTD)
    )
    conn.from_gpu(chunk, 0, tokens, kvcaches=kvcaches, slot_mapping=slots)
    for i, (key, value) in enumerate(kvcaches):
        flat = [c.reshape(BLOCKS * BLOCK_SIZE, -1) for c in (key, value)]
        assert torch.equal(chunk.tensor[0, i], flat[0][slots])  # the whole K row of each token
        assert torch.equal(chunk.tensor[1, i], flat[1][slots])  # and the whole V row

    fresh = kv_caches_4d([(torch.zeros_like(k), torch.zeros_like(v)) for k, v in layers])
    conn.to_gpu(chunk, 0, tokens, kvcaches=fresh, slot_mapping=slots)
    for (key, value), (k2, v2) in zip(kvcaches, fresh, strict=True):
        for a, b in ((key, k2), (value, v2)):
            a, b = a.reshape(BLOCKS * BLOCK_SIZE, -1), b.reshape(BLOCKS * BLOCK_SIZE, -1)
            assert torch.equal(b[slots], a[slots])  # the loaded slots are what was saved
            others = torch.ones(BLOCKS * BLOCK_SIZE, dtype=torch.bool)
            others[slots] = False
            assert not b[others].any()  # and nothing else was written


def test_the_layout_comes_from_the_device_not_the_shape(hpu_connector, monkeypatch):
    # The HPU connector passes no layout hint: LMCache reads vllm-gaudi's [2, NB, BS, NH, HS]
    # right only because the device is not the CPU (where the same shape is taken as HND).
    import lmcache.lmcache_native as lmcache_native
    from lmcache.utils import EngineType
    from lmcache.v1.gpu_connector import utils
    from lmcache.v1.gpu_connector.kv_format.detectors import vllm as detector

    proxy = [torch.empty((2, BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_SIZE), device="meta")]
    fmt, _ = utils.normalize_kv_and_discover_format(proxy, EngineType.VLLM)
    assert fmt == lmcache_native.EngineKVFormat.NL_X_TWO_NB_BS_NH_HS
    monkeypatch.setattr(detector, "torch_device_type", "cpu")
    fmt, _ = utils.normalize_kv_and_discover_format(proxy, EngineType.VLLM)
    assert fmt == lmcache_native.EngineKVFormat.NL_X_TWO_NB_NH_BS_HS
