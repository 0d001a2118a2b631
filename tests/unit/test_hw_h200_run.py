"""hw/h200's connector run, off the GPU: the engine's timing hooks wrap LMCache's methods as
they import, the breakdown reads one request's window of the trace, the plan names only steps
gpu.sh has and variants ship.sh renders, and table.py judges cells against the targets."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "hw" / "h200"
sys.path.insert(0, str(H200))

import breakdown  # noqa: E402
import table  # noqa: E402
import variants as h200_variants  # noqa: E402

FAKE_BACKEND = """
import asyncio
class Key:
    chunk_hash = 1
class Obj:
    def get_size(self):
        return 1000
class RemoteBackend:
    async def batched_async_contains(self, lookup_id, keys, pin=False):
        await asyncio.sleep(0.02)
        return len(keys)
    async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
        await asyncio.sleep(0.05)
        return [Obj() for _ in keys]
"""


def test_trace_hooks_wrap_lmcache_methods_on_import(tmp_path):
    pkg = tmp_path / "lmcache" / "v1" / "storage_backend"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "lmcache", tmp_path / "lmcache" / "v1", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "remote_backend.py").write_text(FAKE_BACKEND)
    trace = tmp_path / "trace.jsonl"
    code = textwrap.dedent("""
        import asyncio
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend, Key
        b = RemoteBackend()
        async def go():
            assert await b.batched_async_contains("req-1", [Key(), Key()]) == 2
            assert len(await b.batched_get_non_blocking("req-1", [Key(), Key()])) == 2
        asyncio.run(go())
    """)
    env = dict(os.environ, KVCEPH_H200_TRACE=str(trace),
               PYTHONPATH=f"{H200 / 'trace'}:{tmp_path}")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)
    evs = [json.loads(x) for x in trace.read_text().splitlines()]
    assert evs[0]["ph"] == "patched"
    assert [(e["ph"], e.get("n"), e.get("hit"), e.get("bytes")) for e in evs[1:]] == [
        ("contains", 2, 2, None),
        ("fetch", 2, None, 2000),
    ]
    assert all(e["id"] == "req-1" for e in evs[1:])


def test_trace_hooks_do_nothing_without_a_trace_file(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(H200 / "trace"))
    env.pop("KVCEPH_H200_TRACE", None)
    code = "import sys; print([type(f).__name__ for f in sys.meta_path])"
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True)  # fmt: skip
    assert "_Finder" not in out.stdout


def _ev(ph, t0, t1, **kw):
    return json.dumps({"ph": ph, "t0": t0, "t1": t1, "pid": 1, **kw})


def test_breakdown_places_each_phase_of_one_request(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join([
        _ev("fetch", 90.0, 91.0, bytes=10**9),  # an earlier request: outside the window
        _ev("contains", 100.2, 100.5, n=64, hit=64),
        _ev("fetch", 100.5, 102.5, n=64, bytes=4 * 10**9, got=64),
        _ev("respond", 102.6, 102.6),
        _ev("retrieve", 102.8, 103.8, hit=16384),
        _ev("to_gpu_batched", 102.9, 103.7),
    ]) + "\n")  # fmt: skip
    b = breakdown.breakdown(str(trace), 100.0, 4.0)
    assert b["lookup_at"] == 0.2 and b["lookup_s"] == 0.3 and b["lookup_hits"] == 64
    assert b["fetch_s"] == 2.0 and b["fetch_GB"] == 4.0 and b["fetch_GBps"] == 2.0
    assert b["retrieve_s"] == 1.0 and b["copy_s"] == 0.8
    assert b["gaps"] == {
        "send->lookup": 0.2, "lookup->fetch_end": 2.3, "fetch_end->respond": 0.1,
        "respond->retrieve": 0.2, "retrieve->retrieve_end": 1.0,
        "retrieve_end->first_token": 0.2,
    }  # fmt: skip


def test_plan_names_known_steps_and_shipped_variants():
    gpu = (H200 / "gpu.sh").read_text()
    variants = {v.name for v in h200_variants.of_plan(H200 / "plan.txt")}
    ids, steps = [], []
    for line in (H200 / "plan.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        sid, need, action, *args = line.split()
        ids.append(sid)
        steps.append((action, args))
        assert int(need) > 0
        assert re.search(rf"^{action}\(\) {{", gpu, re.M) or action == "ceiling", action
        if action in ("cell", "verify"):
            assert args[0] in variants, (sid, args[0])
        if action == "verify":
            assert args[1] in variants
        if action == "cell":
            assert int(args[1]) <= 126976  # the 31.5 GiB buffer holds a 127k document
    assert len(ids) == len(set(ids))
    # the most important first: the layout's ceiling, then both connectors' headline cells
    # (chunk 256) before any other kind of step, so a short loan still compares them
    assert steps[0] == ("ceiling", ["layout"])
    first = next((i for i, (a, _) in enumerate(steps) if a == "verify"), len(steps))
    headline = {
        (args[0].startswith("kv"), args[1])
        for a, args in steps[1:first]
        if a == "cell" and "1024" not in args[0]
    }
    assert {(kv, n) for kv in (True, False) for n in ("16384", "32768")} <= headline


def test_pair_plan_names_known_steps_and_pair_variants():
    gpu = (H200 / "gpu.sh").read_text()
    mine = h200_variants.of_plan(H200 / "plan038.txt")
    pairs = {v.name for v in mine if v.inventory == "h200pair.py"}
    singles = {v.name for v in mine if v.inventory == "h200.py"}
    for line in (H200 / "plan038.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        sid, need, action, *args = line.split()
        assert re.search(rf"^{action}\(\) {{", gpu, re.M) or action == "ceiling", action
        if action == "pairverify":
            assert args[0] in pairs, (sid, args[0])
        if action == "real":
            assert args[0] in singles, (sid, args[0])


def _cell(label, kind, conn, n, ttft, **kw):
    row = {"label": label, "kind": kind, "connector": conn, "document_tokens": n,
           "chunk_size": 256, "kv_dtype": "bfloat16", "ttft_s": ttft}  # fmt: skip
    row.update(kw)
    return json.dumps(row)


def test_table_judges_cells_against_the_targets(tmp_path):
    kv = 16384 * 262144
    (tmp_path / "cells.jsonl").write_text("\n".join([
        _cell("kv16", "cold", "kvceph", 16384, 4.0),
        _cell("kv16-warm", "warm", "kvceph", 16384, 2.0, cold_label="kv16", cold_ttft_s=4.0,
              warm_over_cold=0.5, hit_tokens=16384, kv_bytes=kv, min_hit_tokens=12288,
              inside={"fetch_GBps": 2.4, "fetch_s": 1.8}),
        _cell("kv16b", "cold", "kvceph", 16384, 4.2),
        _cell("kv16b-warm", "warm", "kvceph", 16384, 2.8, cold_label="kv16b", cold_ttft_s=4.2,
              warm_over_cold=0.667, hit_tokens=16384, kv_bytes=kv,
              inside={"fetch_GBps": 2.0, "fetch_s": 2.1}),
        _cell("st16", "cold", "lmcache", 16384, 4.1),
        _cell("st16-warm", "warm", "lmcache", 16384, 7.0, cold_label="st16", cold_ttft_s=4.1,
              warm_over_cold=1.7, hit_tokens=16384, kv_bytes=kv, inside={"fetch_GBps": 0.9}),
    ]) + "\n")  # fmt: skip
    (tmp_path / "ceiling.jsonl").write_text(
        json.dumps({"label": "kv16", "get_GBps": 2.5})
        + "\n"
        + json.dumps({"label": "layout", "get_GBps": 2.9})
        + "\n"
    )
    rs = {r["connector"]: r for r in table.rows(tmp_path)}
    kvr, st = rs["kvceph"], rs["lmcache"]
    assert kvr["reps"] == 2 and kvr["cold_s"] == (4.0, 4.1, 4.2, 2)
    assert kvr["warm/cold"] == 0.5835 and kvr["target"] == 0.6 and kvr["warm_ok"] is True
    assert kvr["ceiling_GBps"] == 2.5 and kvr["ceiling_of"] == "cell"
    assert kvr["fetch/ceiling"] == 0.88 and kvr["fetch_ok"] is True
    assert st["warm_ok"] is False and st["ceiling_of"] == "length" and st["fetch_ok"] is False
    assert kvr["blog"] == 0.3
    assert "| kvceph | s3 | 256 | bfloat16 | 16,384 | 2 |" in table.markdown(tmp_path)


def test_table_keeps_the_dram_tier_apart(tmp_path):
    # the same connector and length, one variant with the node's DRAM tier on (its installed
    # lmcache.yaml, rendered-VARIANT/): two rows, and the stock baseline is the S3 tier's cold
    kv = 16384 * 262144
    (tmp_path / "rendered-kvd").mkdir()
    (tmp_path / "rendered-kvd" / "lmcache.yaml").write_text("chunk_size: 256\nlocal_cpu: true\n")
    (tmp_path / "rendered-kv").mkdir()
    (tmp_path / "rendered-kv" / "lmcache.yaml").write_text("chunk_size: 256\nlocal_cpu: false\n")
    (tmp_path / "cells.jsonl").write_text("\n".join([
        _cell("a", "cold", "kvceph", 16384, 2.5, variant="kv"),
        _cell("a-warm", "warm", "kvceph", 16384, 1.7, cold_label="a", cold_ttft_s=2.5,
              warm_over_cold=0.68, hit_tokens=16384, kv_bytes=kv, variant="kv"),
        _cell("b", "cold", "kvceph", 16384, 2.4, variant="kvd"),
        _cell("b-warm", "warm", "kvceph", 16384, 0.23, cold_label="b", cold_ttft_s=2.4,
              warm_over_cold=0.096, hit_tokens=16384, kv_bytes=kv, variant="kvd"),
    ]) + "\n")  # fmt: skip
    rs = {r["tier"]: r for r in table.rows(tmp_path)}
    assert set(rs) == {"s3", "dram"}
    assert rs["s3"]["warm_s"][1] == 1.7 and rs["dram"]["warm_s"][1] == 0.23
    assert rs["dram"]["reps"] == 1 and rs["dram"]["warm/cold"] == 0.096


def test_each_plan_names_the_variants_its_steps_use():
    # issue 55 item 5: a plan's variants are data beside it (planNNN.variants); ship.sh renders
    # every plan's, each name once
    every = {v.name for v in h200_variants.load()}
    for plan in sorted(H200.glob("plan*.txt")):
        own = {v.name for v in h200_variants.of_plan(plan)}
        assert own <= every
        for line in plan.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            _, _, action, *args = line.split()
            named = {a for a in args if a in every}
            assert named <= own, (plan.name, line, named - own)
    for v in h200_variants.load():
        assert all("=" in a and not a.startswith("$") for a in v.args), v
        assert (H200 / v.inventory).exists(), v


def test_variants_expand_definitions_and_refuse_two_meanings(tmp_path):
    (tmp_path / "defs.variants").write_text(
        "A = k1=1\nB = $A 'k2={\"x\": [1, 2]}'  # a JSON value is one quoted token\n"
    )
    (tmp_path / "plan.variants").write_text("# c\nv1 $B k3=3\nv2 inventory=h200pair.py $A\n")
    (tmp_path / "plan054.variants").write_text("v1 $B k3=3\n")
    got = h200_variants.load(tmp_path)
    assert [(v.name, v.inventory, v.args) for v in got] == [
        ("v1", "h200.py", ("k1=1", 'k2={"x": [1, 2]}', "k3=3")),
        ("v2", "h200pair.py", ("k1=1",)),
    ]
    (tmp_path / "plan054.variants").write_text("v1 $B k3=4\n")
    with pytest.raises(h200_variants.VariantError, match="v1 differs from plan.variants"):
        h200_variants.load(tmp_path)
    (tmp_path / "plan054.variants").write_text("v3 $C\n")
    with pytest.raises(h200_variants.VariantError, match=r"\$C is not defined"):
        h200_variants.load(tmp_path)
