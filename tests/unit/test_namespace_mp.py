"""MP names under kvceph's namespace (render.mp_prefix): the same inputs as in-process, one
more field for the mode, inside the group's grant, listed by status like in-process ones."""

from __future__ import annotations

import itertools

import pytest

from deploys import render
from deploys import settings as s
from deploys.access import engine_users
from deploys.cluster import bucket_policy
from deploys.settings import namespace
from deploys.settings.inventory import check_inventory

MP = {
    "kvceph_s3_endpoint_ip": "10.0.0.5",
    "kvceph_engine_preset": "vllm-0.34-mp",
    "kvceph_accept_mp_serve_defect": True,  # the real pair cannot serve yet (loan 12)
}
REV = "0123456789abcdef0123456789abcdef01234567"


def host(name="gpu1", group="gpu", **data):
    return s.load({**MP, **data}, name, (group,))


def pp(n: int) -> dict:
    return {"kvceph_engine_profile": {"extra_args": ["--pipeline-parallel-size", str(n)]}}


@pytest.mark.parametrize(
    "change",
    [
        {"kvceph_kv_dtype": "fp8"},
        {"kvceph_lmcache_chunk_size": 512},
        {"kvceph_model_source": "mirror", "kvceph_model_revision": REV},
        {"kvceph_engine_profile": {"vllm_version": "0.25.1", "packages": ["vllm==0.25.1"]}},
        {"kvceph_engine_profile": {"extra_args": ["--quantization", "fp8"]}},
        {"kvceph_tensor_parallel_size": 4},
        {"kvceph_tensor_parallel_size": 1, **pp(2)},
        {"kvceph_model": "/models/Qwen_Qwen3-32B"},
    ],
    ids=["kv-dtype", "chunk", "revision", "layout", "kv-flags", "tp", "tp-vs-pp", "model"],
)
def test_every_input_of_the_in_process_namespace_changes_the_mp_one(change):
    other = host(**change)
    assert render.mp_prefix(host()) != render.mp_prefix(other)


def test_mp_and_in_process_names_never_meet_and_mp_names_the_lmcache_minor():
    mp = host()
    ns = namespace.of(mp)
    assert ns.mode == "mp-lmcache0.5" and render.mp_prefix(mp).endswith("@mp-lmcache0.5/")
    # The same settings in-process: the prefix without the mode field, so neither starts the other.
    base = ns.__class__(**{**ns.__dict__, "mode": ""}).prefix
    assert base != ns.prefix and not ns.prefix.startswith(base)
    assert namespace.mp_mode("0.5.7rc2") == "mp-lmcache0.5" != namespace.mp_mode("0.6.0")


def test_the_group_grant_covers_the_mp_namespace_and_no_other_groups():
    a, b = host(kvceph_tensor_parallel_size=2), host("gpu2", kvceph_tensor_parallel_size=1, **pp(2))
    assert render.mp_prefix(a).startswith(namespace.object_prefix(a))
    assert not render.mp_prefix(b).startswith(namespace.object_prefix(a))
    groups = check_inventory([host("admin", "ceph_admin"), a, b])
    users = engine_users.group_users({"gpu1": a, "gpu2": b}, groups)
    by_prefix = {u.prefix: u for u in users}
    assert set(by_prefix) == {namespace.object_prefix(a), namespace.object_prefix(b)}
    assert not any(p != q and q.startswith(p) for p, q in itertools.permutations(by_prefix, 2))
    stmts = bucket_policy.statements("lmcache", users)
    resources = [r for st in stmts for r in st["Resource"] if st["Sid"].endswith("-objects")]
    mine = [r for r in resources if render.mp_prefix(a).startswith(r.split("/", 1)[1][:-1])]
    assert len(mine) == 1  # only its own group's grant reaches its MP names


def test_status_lists_the_mp_namespace_as_current():
    from deploys.status import document

    me = host()
    rows = document.namespace_rows({"namespaces": [render.mp_prefix(me)]}, {"gpu1": me})
    assert rows[0]["current"] and rows[0]["namespace"] == render.mp_prefix(me)
