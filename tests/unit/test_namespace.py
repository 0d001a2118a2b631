"""One namespace per KV byte layout (deploys/settings/namespace.py): each collision of issue 50."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from deploys import render
from deploys import settings as s
from deploys.access import engine_users
from deploys.cluster import bucket_policy
from deploys.monitoring import targets
from deploys.settings import namespace
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import SettingsError
from deploys.verification import bookkeeping, object_names

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_lmcache_connector": "kvceph"}
QWEN = "Qwen/Qwen3-32B"
REV = "0123456789abcdef0123456789abcdef01234567"


def host(name="gpu1", group="gpu", **data):
    return s.load({**BASE, **data}, name, (group,))


def pp(n: int) -> dict:
    return {"kvceph_engine_profile": {"extra_args": ["--pipeline-parallel-size", str(n)]}}


def test_tp2_pp1_and_tp1_pp2_are_two_namespaces_groups_and_grants():
    a = host(kvceph_tensor_parallel_size=2)
    b = host("gpu2", kvceph_tensor_parallel_size=1, **pp(2))
    # LMCache's own names collide (world size 2 both): the namespace tells them apart.
    assert bucket_policy.object_prefix(QWEN, 2) == bucket_policy.object_prefix(QWEN, 1 * 2)
    assert namespace.prefix(a) != namespace.prefix(b)
    assert "@tp2@pp1@" in namespace.prefix(a) and "@tp1@pp2@" in namespace.prefix(b)
    assert targets.cache_group(a) == f"{QWEN} tp2" and targets.cache_group(b) == f"{QWEN} tp1 pp2"
    assert (a.engine.cache_group, b.engine.cache_group) == ("qwen3-32b-tp2", "qwen3-32b-tp1-pp2")
    groups = check_inventory([host("admin", "ceph_admin"), a, b])
    assert sorted((g.tensor_parallel_size, g.pipeline_parallel_size) for g in groups) == [
        (1, 2),
        (2, 1),
    ]
    users = engine_users.group_users({"gpu1": a, "gpu2": b}, groups)
    prefixes = [u.prefix for u in users]
    # A grant is "<prefix>*": no group's prefix may start another's.
    assert not any(p != q and q.startswith(p) for p, q in itertools.permutations(prefixes, 2))


def test_model_paths_whose_slashes_lmcache_turns_into_underscores_are_two_namespaces():
    a = host(kvceph_model="/models/Qwen_Qwen3-32B")
    b = host(kvceph_model="/models/Qwen/Qwen3-32B")
    assert a.engine.serve_model.replace("/", "_") == b.engine.serve_model.replace("/", "_")
    assert namespace.prefix(a) != namespace.prefix(b)


@pytest.mark.parametrize(
    "change",
    [
        {"kvceph_kv_dtype": "fp8"},
        {"kvceph_lmcache_chunk_size": 512},
        {"kvceph_model_source": "mirror", "kvceph_model_revision": REV},
        {
            "kvceph_engine_profile": {"vllm_version": "0.26.0", "packages": ["vllm==0.26.0"]},
            "kvceph_accept_kv_load_defect": True,
        },
        {"kvceph_engine_profile": {"extra_args": ["--quantization", "fp8"]}},
        {"kvceph_tensor_parallel_size": 4},
    ],
    ids=["kv-dtype", "chunk-size", "revision", "layout", "kv-flags", "tp"],
)
def test_every_input_that_changes_the_bytes_changes_the_namespace(change):
    assert namespace.prefix(host()) != namespace.prefix(host(**change))


def test_layout_generation_follows_the_engine_version_and_accelerator():
    assert namespace.layout_generation("nvidia", "0.25.1") == namespace.SPLIT
    assert namespace.layout_generation("nvidia", "0.26.0") == namespace.PACKED
    assert namespace.layout_generation("nvidia", "0.33.0") == namespace.PACKED
    assert namespace.layout_generation("gaudi", "0.26.0") == namespace.HPU_TUPLE
    assert "@hpu-kv-tuple@" in namespace.prefix(host("g1", "gaudi"))


def test_the_prefix_is_injective_even_for_fields_holding_the_separators():
    ns = namespace.Namespace("a", "b", "bfloat16", 1, 1, 256, "kv-split", "naive", "none")
    tricky = [
        dataclasses.replace(ns, model="a@b", revision="c"),
        dataclasses.replace(ns, model="a", revision="b@c"),
        dataclasses.replace(ns, model="a/b"),
        dataclasses.replace(ns, model="a%2Fb"),
        dataclasses.replace(ns, model="a_b"),
        dataclasses.replace(ns, serde="cachegen"),
        dataclasses.replace(ns, kv_flags="--dtype=float16"),
        ns,
    ]
    prefixes = [t.prefix for t in tricky]
    assert len(set(prefixes)) == len(tricky)
    for p in prefixes:
        assert p.startswith(namespace.ROOT) and p.endswith("/") and p.count("/") == 2
        assert "*" not in p and "?" not in p  # bucket policy wildcards


def test_stock_connector_has_no_namespace_and_keeps_lmcaches_prefix():
    me = host(kvceph_lmcache_connector="lmcache")
    assert namespace.prefix(me) == ""
    assert namespace.object_prefix(me) == "Qwen_Qwen3-32B@2@"
    assert "kvceph.namespace" not in render.lmcache_config(me)["extra_config"]


def test_the_connector_is_a_group_invariant_now():
    with pytest.raises(SettingsError, match="kvceph_lmcache_connector = 'lmcache' differs"):
        check_inventory(
            [host("admin", "ceph_admin"), host(), host("gpu2", kvceph_lmcache_connector="lmcache")]
        )


def test_lmcache_yaml_carries_the_namespace_the_verifier_names_objects_in():
    me = host()
    ns = namespace.prefix(me)
    assert render.lmcache_config(me)["extra_config"]["kvceph.namespace"] == ns
    names = object_names.names(
        list(range(600)),
        model=me.engine.serve_model,
        world_size=2,
        chunk_size=256,
        save_unfull_chunk=False,
        algorithm="sha256_cbor",
        seed=67,
        namespace=ns,
    )
    assert len(names) == 4 and all(n.startswith(ns) for n in names)
    assert namespace.split(names[0]) == (ns, names[0][len(ns) :])
    assert object_names.stem(names[0]).startswith(ns + "Qwen_Qwen3-32B@2@0@")
    assert bookkeeping.worker_counts(names) == {"0": 2, "1": 2}
    assert bookkeeping.object_prefix(QWEN, 2, ns) == ns
    assert namespace.split("Qwen_Qwen3-32B@2@0@ab@bfloat16") == (
        "",
        "Qwen_Qwen3-32B@2@0@ab@bfloat16",
    )


def _in_use(me) -> dict:
    """The CacheKeyInUse fact over this host's rendered lmcache.yaml, env file and unit."""
    import re

    from deploys.facts.engine import _CACHE_KEY_LINES, CacheKeyInUse

    text = render.lmcache_yaml(me) + render.env_file(me) + render.unit(me)
    return CacheKeyInUse().process(
        [ln for ln in text.splitlines() if re.search(_CACHE_KEY_LINES, ln)]
    )


def test_the_fact_reads_the_namespace_back_and_a_new_one_warns_of_a_cold_start():
    from deploys.stages.inference_config import cache_key_changes

    me = host()
    in_use = _in_use(me)
    assert in_use["kvceph.namespace"] == namespace.prefix(me)
    assert cache_key_changes(in_use, me) == []
    # The setting's own line, then the namespace's: the group starts cold.
    setting, line = cache_key_changes(in_use, host(kvceph_lmcache_chunk_size=512))
    assert "kvceph_lmcache_chunk_size changes 256 -> 512" in setting
    assert "object namespace changes kv/" in line and "starts cold" in line
    assert "status.py lists them" in line
    # An engine configured before namespaces wrote at the bucket root.
    before = {k: v for k, v in in_use.items() if k != "kvceph.namespace"}
    (line,) = cache_key_changes(before, me)
    assert "changes the bucket root -> kv/" in line


def test_status_shows_the_old_namespace_until_the_lifecycle_removes_it():
    from deploys.status import document, output

    me = host()
    current = namespace.prefix(me)
    old = current.replace("@c256@", "@c512@")
    rows = document.namespace_rows(
        {"namespaces": sorted([current, old]), "bucket_root": True}, {"gpu1": me}
    )
    assert {r["namespace"]: r["current"] for r in rows} == {current: True, old: False, "": False}
    lines = output.namespace_lines({"namespaces": rows})
    assert f"namespace {current}: written by {QWEN} tp2" in lines
    assert any(ln.startswith(f"namespace {old}: no group writes it") for ln in lines)
    assert any(ln.startswith("namespace bucket root") for ln in lines)
    assert document.namespace_rows(None, {"gpu1": me}) == []


def test_s3admin_lists_namespaces_with_two_delimiter_listings(capsys, monkeypatch):
    import json

    from deploys.remote import s3admin

    calls = []

    class Client:
        def list_objects_v2(self, **kw):
            calls.append(kw)
            if kw.get("Prefix") == "kv/":
                return {"CommonPrefixes": [{"Prefix": "kv/b/"}, {"Prefix": "kv/a/"}]}
            return {
                "Contents": [{"Key": "m@1@0@ab@bfloat16"}],
                "CommonPrefixes": [{"Prefix": "kv/"}],
            }

    monkeypatch.setattr(s3admin, "s3_client", lambda config: Client())
    s3admin.list_namespaces({"endpoint": "http://127.0.0.1:80"}, "lmcache")
    got = json.loads(capsys.readouterr().out)
    assert got == {"namespaces": ["kv/a/", "kv/b/"], "bucket_root": True, "truncated": False}
    assert all(c["Delimiter"] == "/" and c["MaxKeys"] == 1000 for c in calls)


def test_the_group_grant_covers_every_namespace_of_the_group_and_no_other():
    me = host()
    grant = namespace.object_prefix(me)
    assert grant == "kv/Qwen%2FQwen3-32B@tp2@pp1@"
    # A roll onto another layout or chunk size keeps the old engines inside the grant.
    for other in (host(kvceph_lmcache_chunk_size=512), host(kvceph_kv_dtype="fp8")):
        assert namespace.prefix(other).startswith(grant)
    for group in (host(kvceph_tensor_parallel_size=1, **pp(2)), host(kvceph_model="Qwen/Qwen3-8B")):
        assert not namespace.prefix(group).startswith(grant)
    # The probe writes under the current namespace, inside the grant.
    from deploys.probe.controller import group_prefix

    assert group_prefix(me) == namespace.prefix(me)
