# ruff: noqa: E501 - the engines' lines below are verbatim, as recorded
"""hw/h200's router benchmark (issue 54), off the GPU: each request's KV source from the engines'
own lines (recorded on the H200, vLLM 0.25.1 + LMCache 0.5.6, loan 9), the seeded workloads at
their sharing levels, the tables, the route's config as the router stage renders it, and the
plan's steps."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "hw" / "h200"
sys.path.insert(0, str(H200))

import rbaccount  # noqa: E402
import rbtable  # noqa: E402
import routerbench  # noqa: E402
import variants as h200_variants  # noqa: E402

# hw/h200/results/2026-12-04-cmp/engine.{1,3}.filtered.txt and trace.jsonl: a warm request from
# S3 (kv25l: DRAM tier off, after /reset_prefix_cache), a cold one (16 tokens of the chat
# template from vLLM's prefix cache), a same-node repeat from DRAM (kv25ld)
S3_ID, COLD_ID, DRAM_ID = (
    "chatcmpl-a4f646527e42394c-bbb3eff2",
    "chatcmpl-9f40d32aae2b97a0-9751dfe5",
    "chatcmpl-b6b61f74e39158b2-9d6ecdd7",
)
LOG = f"""\
(EngineCore pid=3258) [2026-12-04 13:38:25,975] LMCache INFO: Responding to scheduler for lookup id {S3_ID} with retrieved length 16384 (storage_manager.py:648:lmcache.v1.storage_backend.storage_manager)
(EngineCore pid=3258) [2026-12-04 13:38:25,982] LMCache INFO: Reqid: {S3_ID}, Total tokens 16433, Inference Engine computed tokens: 0, LMCache hit tokens: 16384, need to load: 16384 (vllm_v1_adapter.py:1476:lmcache.integration.vllm.vllm_v1_adapter)
(EngineCore pid=3258) [2026-12-04 13:38:26,090] LMCache INFO: [req_id={S3_ID}] Retrieved 16384 out of 16384 required tokens (from 16384 total tokens). size: 4.0000 gb, cost 90.2933 ms, throughput: 44.3001 GB/s; (cache_engine.py:985:lmcache.v1.cache_engine)
(EngineCore pid=3258) [2026-12-04 13:38:30,338] LMCache INFO: Reqid: {COLD_ID}, Total tokens 32817, Inference Engine computed tokens: 16, LMCache hit tokens: 0, need to load: 0 (vllm_v1_adapter.py:1476:lmcache.integration.vllm.vllm_v1_adapter)
(EngineCore pid=3258) [2026-12-04 13:38:31,358] LMCache INFO: [req_id={COLD_ID}] Stored 8192 out of total 8192 tokens. size: 2.0000 GB, cost 70.4475 ms, throughput: 28.3899 GB/s; offload_time: 69.0157 ms, put_time: 1.3713 ms (cache_engine.py:588:lmcache.v1.cache_engine)
(EngineCore pid=8343) [2026-12-04 13:50:06,836] LMCache INFO: Reqid: {DRAM_ID}, Total tokens 16433, Inference Engine computed tokens: 0, LMCache hit tokens: 16384, need to load: 16384 (vllm_v1_adapter.py:1476:lmcache.integration.vllm.vllm_v1_adapter)
(EngineCore pid=8343) [2026-12-04 13:50:06,928] LMCache INFO: [req_id={DRAM_ID}] Retrieved 16384 out of 16384 required tokens (from 16384 total tokens). size: 4.0000 gb, cost 87.0634 ms, throughput: 45.9435 GB/s; (cache_engine.py:985:lmcache.v1.cache_engine)
"""
TRACE = [
    f'{{"ph": "contains", "t0": 1796391504.5697446, "t1": 1796391504.5700154, "pid": 3258, "id": "{S3_ID}", "n": 64, "hit": 64}}',
    f'{{"ph": "lookup_prefetch", "t0": 1796391504.5697105, "t1": 1796391504.5701544, "pid": 3258, "id": "{S3_ID}", "n": 64}}',
    f'{{"ph": "fetch", "t0": 1796391504.5702007, "t1": 1796391505.9748063, "pid": 3258, "id": "{S3_ID}", "n": 64, "bytes": 4294967296, "got": 64}}',
    f'{{"ph": "contains", "t0": 1796391510.3273692, "t1": 1796391510.330079, "pid": 3258, "id": "{COLD_ID}", "n": 128, "hit": 0}}',
    f'{{"ph": "lookup_prefetch", "t0": 1796391510.3273358, "t1": 1796391510.3301837, "pid": 3258, "id": "{COLD_ID}", "n": 128}}',
    f'{{"ph": "lookup_prefetch", "t0": 1796392206.825411, "t1": 1796392206.8260138, "pid": 8343, "id": "{DRAM_ID}", "n": 64}}',
    '{"ph": "store", "t0": 1796391202.3091826, "t1": 1796391202.373821, "pid": 3258}',
]  # fmt: skip


def _sources(dram_on=True):
    lines = rbaccount.engine_lines(LOG)
    remote = rbaccount.trace_remote(TRACE)
    return {rid: rbaccount.source("h200a", lines[rid], remote.get(rid), 256, dram_on)
            for rid in lines}  # fmt: skip


def test_recorded_lines_give_s3_dram_and_recompute():
    s = _sources()
    # the remote backend fetched all 64 chunks: S3; the last 49 tokens (a partial chunk) computed
    assert (s[S3_ID].gpu, s[S3_ID].dram, s[S3_ID].s3, s[S3_ID].recompute) == (0, 0, 16384, 49)
    assert s[S3_ID].tier == "s3"
    # loaded, and no remote record for it: the DRAM tier answered every chunk (LMCache asks
    # the remote backend only for the chunks after the DRAM tier's)
    assert (s[DRAM_ID].dram, s[DRAM_ID].s3, s[DRAM_ID].tier) == (16384, 0, "dram")
    assert (s[COLD_ID].gpu, s[COLD_ID].recompute, s[COLD_ID].tier) == (16, 32801, "recompute")
    # every token of the prompt in exactly one tier
    for x in s.values():
        assert x.gpu + x.dram + x.s3 + x.recompute == x.prompt
    # with the DRAM tier off every loaded token came from S3, whatever the trace says
    assert _sources(dram_on=False)[DRAM_ID].s3 == 16384


def test_gpu_prefix_and_both_lmcache_tiers_in_one_request():
    # the recorded line's format, with vLLM's prefix cache holding 4,096 tokens: LMCache loads
    # from token 4096; its DRAM tier held the first 8 chunks (2,048 tokens), S3 the next 24
    rid = "cmpl-rbabc-0-1234abcd"
    log = (
        f"LMCache INFO: Reqid: {rid}, Total tokens 8300, Inference Engine computed tokens: "
        "4096, LMCache hit tokens: 8192, need to load: 4096 (vllm_v1_adapter.py:1476)\n"
        f"LMCache INFO: [req_id={rid}] Retrieved 4096 out of 4096 required tokens (from 8192 "
        "total tokens). size: 1.0 gb\n"
    )
    trace = [json.dumps({"ph": "lookup_prefetch", "t0": 5, "id": rid, "n": 33}),
             json.dumps({"ph": "contains", "t0": 5, "id": rid, "n": 25, "hit": 24}),
             json.dumps({"ph": "fetch", "t0": 5, "id": rid, "n": 24, "got": 24})]  # fmt: skip
    lines = rbaccount.engine_lines(log)
    s = rbaccount.source("h200b", lines[rid], rbaccount.trace_remote(trace)[rid], 256, True)
    assert (s.gpu, s.dram, s.s3, s.recompute) == (4096, 0, 4096, 108)
    assert s.tier == "gpu"  # ties go to the faster tier
    # vLLM held 1,024: the DRAM tier's chunks serve 1,024-2,048, S3 the rest
    log2 = (
        log.replace("computed tokens: 4096", "computed tokens: 1024")
        .replace("need to load: 4096", "need to load: 7168")
        .replace("Retrieved 4096 out of 4096", "Retrieved 7168 out of 7168")
    )
    s = rbaccount.source("h200b", rbaccount.engine_lines(log2)[rid],
                         rbaccount.trace_remote(trace)[rid], 256, True)  # fmt: skip
    assert (s.gpu, s.dram, s.s3, s.recompute, s.tier) == (1024, 1024, 6144, 108, "s3")
    # looked up, to load, never retrieved (LMCache gave up): recomputed
    s = rbaccount.source("h200b", rbaccount.engine_lines(log.splitlines()[0])[rid], None, 256, True)
    assert (s.gpu, s.recompute) == (4096, 4204)


def test_requests_match_their_engine_lines_by_response_id_or_tag():
    ids = ["cmpl-rb1x0001-0-9a8b7c6d", "cmpl-rb1x0010-0-00000000", "cmpl-0f0f"]
    # vLLM: the response carries cmpl-<X-Request-Id>; the engine adds -<n>-<suffix>
    assert rbaccount.match("cmpl-rb1x0001", ids) == ids[0]
    assert rbaccount.match("cmpl-rb1x0010", ids) == ids[1]
    assert rbaccount.match("cmpl-0f0f", ids) == "cmpl-0f0f"  # the lab engine: the id itself
    assert rbaccount.match(None, ids, "rb1x0010") == ids[1]
    assert rbaccount.match("cmpl-other", ids) is None


def test_account_names_each_requests_engine_and_counts_the_unaccounted():
    lab = (
        "INFO lmcache: request=cmpl-aa prompt_tokens=512 hit_tokens=256 loaded_tokens=256 "
        "dram_tokens=0 local_hit_tokens=0 computed_tokens=256 stored_chunks=1 load_s=0.1 "
        "prefill_s=0.05\n"
    )
    rows = [{"id": "cmpl-aa", "status": 200}, {"id": f"{S3_ID[:-9]}", "status": 200},
            {"id": "cmpl-none", "status": 200}, {"id": None, "status": 503}]  # fmt: skip
    out = rbaccount.account(rows, {"h200a": LOG, "h200b": lab}, TRACE, 256, True)
    assert out[0]["source"]["engine"] == "h200b"
    assert (out[0]["source"]["s3"], out[0]["source"]["recompute"]) == (256, 256)
    assert out[1]["source"]["engine"] == "h200a" and out[1]["source"]["tier"] == "s3"
    assert out[2]["source"] is None
    s = rbaccount.summary(out)
    assert (s["requests"], s["failed"], s["unaccounted"]) == (4, 1, 1)
    assert s["tier_requests"] == {"gpu": 0, "dram": 0, "s3": 2, "recompute": 0}
    assert s["engines"] == {"h200a": 1, "h200b": 1}


@pytest.mark.parametrize("workload", ["qa", "sessions"])
@pytest.mark.parametrize("level", ["25", "60", "90"])
def test_workloads_are_seeded_and_share_at_their_level(workload, level):
    make = routerbench.WORKLOADS[workload]
    a, b = make(level, 1, "rbcell"), make(level, 1, "rbcell")
    assert a == b  # the same documents at the same times for both policies
    assert make(level, 2, "rbcell") != a  # another run, another draw
    s = routerbench.sharing(a)
    assert s["followups"] == pytest.approx(int(level) / 100, abs=0.02)
    first = {r.group: r.prompt.split()[0] for r in a}
    assert all(r.prompt.split()[0] == first[r.group] for r in a)
    # no group's first word is a prefix of another's: the router's tree matches characters
    assert len({w[:4] for w in first.values()}) == len(first)
    words = set(routerbench.WORDS)
    for r in a:
        tokens = r.prompt.split()
        assert len(tokens) == r.words and set(tokens[1:]) <= words
        if r.shared:  # the shared part is an earlier request's prefix in its group
            prefix = tokens[: r.shared]
            earlier = [o for o in a if o.group == r.group and o.step < r.step]
            assert any(o.prompt.split()[: r.shared] == prefix for o in earlier)
    assert [r.at for r in a] == sorted(r.at for r in a) or workload == "qa"


def _req(wl, lvl, pol, run, ttft, tier, tps=50.0, status=200):
    src = {"tier": tier, "engine": "h200a", **dict.fromkeys(rbtable.TIERS, 0)} if tier else None
    if src:
        src[tier] = 100
    return {"kind": "request", "workload": wl, "level": lvl, "policy": pol, "run": run,
            "ttft": ttft, "status": status, "out_tps": tps, "source": src}  # fmt: skip


def test_table_reports_runs_percentiles_tiers_and_the_overhead(tmp_path):
    rows = []
    for run, base in ((1, 0.10), (2, 0.20), (3, 0.30)):
        rows += [_req("qa", 90, "cache_aware", run, base + i / 100, "gpu") for i in range(10)]
        rows += [_req("qa", 90, "round_robin", run, 2 * base + i / 100, "s3") for i in range(10)]
    rows.append(_req("qa", 90, "round_robin", 3, None, None, status=503))
    rows.append(_req("qa", 90, "round_robin", 3, 0.5, None))
    rows.append({"kind": "cell", "workload": "qa", "level": 90, "sharing": {"followups": 0.9}})
    rows.append({"kind": "overhead", "summary": {"16": {"direct": 0.03, "router": 0.032,
                                                        "added_s": 0.002, "n": 20}}})  # fmt: skip
    (tmp_path / "routerbench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = rbtable.table(rbtable.load(str(tmp_path)))
    # p50 of each run (nearest rank: the 5th of 10), median over the runs and their spread
    assert "| qa | 90 % (0.90) | cache_aware | 3 | 30 | 0.240 (0.140-0.340) |" in out
    assert "| 1.00 | 0.00 | 0.00 | 0.00 | 0 | 0 |" in out
    assert "| 0 | 1 |" not in out.split("cache_aware")[1].split("\n")[0]
    rr = next(line for line in out.splitlines() if "| round_robin | 3 |" in line)
    assert rr.endswith("| 1 | 1 |")  # one unaccounted, one failed
    assert "| qa | 90 % | 0.240 | 0.440 | 1.83 |" in out
    assert "| 16 | 20 | 0.03 | 0.032 | 0.002 |" in out
    assert rbtable.pct([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == 9
    assert rbtable.pct([1.0] * 99 + [5.0], 99) == 1.0


def test_router_json_is_the_router_stages_config(tmp_path, monkeypatch):
    import render as h200

    from deploys.router import routes as routing

    monkeypatch.setattr(h200, "INVENTORY", H200 / "h200router.py")
    pair = {"kvceph_model": "/opt/models/Qwen3-8B-shape", "kvceph_gpu_memory_utilization": 0.4,
            "kvceph_max_model_len": 40960}  # fmt: skip
    inv, hosts, _ = h200.load(pair)
    h200.write_routes(tmp_path, inv, hosts, "h200a", h200.credentials())
    got = json.loads((tmp_path / "router.json").read_text())
    assert len(got) == 1 and got[0]["host"] == "h200a"
    cfg = got[0]["config"]
    assert cfg["worker_urls"] == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
    route = routing.routes(hosts, {h: "127.0.0.1" for h in hosts}, hosts["h200a"].router,
                           "h200a")[0]  # fmt: skip
    assert cfg == routing.config(route, hosts["h200a"].router)
    assert cfg["policy"] == "cache_aware" and "api_key_validation_urls" not in cfg


def test_plan054_names_known_steps_and_the_router_variant():
    gpu = (H200 / "gpu.sh").read_text()
    variants = {v.name for v in h200_variants.of_plan(H200 / "plan054.txt")
                if v.inventory == "h200router.py"}  # fmt: skip
    cells = set()
    for line in (H200 / "plan054.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        sid, need, action, *args = line.split()
        assert re.search(rf"^{action}\(\) {{", gpu, re.M) or action == "ceiling", action
        assert int(need) > 0
        if action == "rbench":
            assert args[0] in variants
            if args[1] != "overhead":
                assert args[1] in ("cache_aware", "round_robin")
                assert args[2] in routerbench.WORKLOADS and args[3] in routerbench.LEVELS
                cells.add(tuple(args[1:]))
    # every workload x level x policy, three runs each
    assert len(cells) == 2 * 2 * 3 * 3


def test_table_checks_the_lines_against_the_engines_counters():
    src = {"engine": "h200a", "prompt": 300, "gpu": 100, "tier": "gpu"}
    rows = [
        {"kind": "request", "label": "c1", "source": src},
        {"kind": "request", "label": "c1", "source": {**src, "gpu": 0}},
        {"kind": "cell", "label": "c1", "counters": {
            "h200a": {"vllm:prompt_tokens": 600.0, "vllm:prefix_cache_hits": 100.0},
            "h200b": {"vllm:prompt_tokens": 0.0, "vllm:prefix_cache_hits": 0.0}}},
        {"kind": "cell", "label": "c2", "counters": {
            "h200a": {"vllm:prompt_tokens": 50.0, "vllm:prefix_cache_hits": None}}},
    ]  # fmt: skip
    assert rbtable.cross_check(rows).startswith("Counters: 2 of 2 ")
    rows[2]["counters"]["h200b"]["vllm:prompt_tokens"] = 16.0
    assert "c1/h200b: lines (0, 0), counters (16.0, 0.0)" in rbtable.cross_check(rows)
