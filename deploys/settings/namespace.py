"""One namespace per KV byte layout: the object-name prefix kvceph's connector writes under.

Pure module. LMCache 0.5.6 names a chunk ``<model argument>@<TP x PP>@<worker>@<hash>@<dtype>``
(its '/' turned into '_', CacheEngineKey.to_string), which leaves distinct byte layouts under one
name: TP 2 / PP 1 and TP 1 / PP 2 both write ``@2@``, ``/m/Qwen_Qwen3-32B`` and
``/m/Qwen/Qwen3-32B`` give the same name, and nothing names the engine's KV layout, chunk size,
serde or weights' revision. kvceph's connector therefore puts :func:`prefix` in front of every
name (``kvceph.namespace`` in lmcache.yaml; connector/src/kvceph_connector/s3core.py
``object_path``)::

    kv/<model>@tp<TP>@pp<PP>@<revision>@<kv dtype>@c<chunk>@<layout>@<serde>@<kv flags>/<key>

LMCache's MP server (profile mode "mp") names its keys ``<model>@<kv_rank>@<group>@<blake3>``
itself; kvceph's MP plugin puts the same namespace with one more field, ``@mp-lmcache<minor>``,
in front of them (``render.mp_prefix``), so MP names sit under the group's grant too and never
meet an in-process name.

Each field is percent-quoted (no '/', '@' or '%' of its own is left), so the mapping from
settings to prefix is injective and a prefix never holds a bucket policy's wildcards. The fields
that tell cache groups apart come first: the group's RGW user is granted ``kv/<model>@tp@pp@``
(:func:`object_prefix`), every namespace its engines ever write, so during a roll onto another
layout the engines not yet moved keep reading and writing their own (old) namespace. A change
of any field is a new namespace: the group starts cold (the inference-config warning) and the
old namespace's objects stay until the lifecycle rule removes them (status.py lists them).

LMCache's stock connector (``kvceph_lmcache_connector: lmcache``) names its objects itself at
the bucket root and reads no prefix (0.5.6 ``s3_connector.py``; ``s3_file_prefix`` is gone): its
only namespace is LMCache's key, see :data:`STOCK_GAP`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from deploys.settings import kv_flags

if TYPE_CHECKING:
    from deploys.settings import HostSettings

#: Every namespace lives under this folder: one delimiter listing finds them all (status.py).
ROOT = "kv/"
#: Why the stock connector's objects carry no namespace (docs/settings.md says the same).
STOCK_GAP = (
    "LMCache 0.5.6's stock S3 connector names objects CacheEngineKey.to_string() at the bucket "
    "root and reads no prefix: TP x PP, the KV layout, chunk size, serde and revision are not in "
    "its names; use kvceph_lmcache_connector: kvceph (the default) for one namespace per layout"
)

# The engine's KV cache layout per accelerator and vLLM minor, as LMCache's in-process
# connector sees it (docs/design.md "Namespaces"):
# - nvidia, vLLM < 0.26: one tensor per layer [2, blocks, block size, kv heads, head size]
#   (K and V split on the first axis; LMCache 0.5.6 VLLMPagedMemGPUConnectorV2 copies it right);
# - nvidia, vLLM >= 0.26 (PR #44455): [blocks, kv heads, block size, 2 x head size], K|V
#   packed in the last axis (copied with half the row width: LMCache #4463);
# - gaudi (vllm-gaudi): a (K, V) tuple per layer, each [blocks, block size, kv heads, head size]
#   (vllm_gaudi/v1/worker/hpu_model_runner.py get_kv_caches_4D), copied by LMCache 0.5.6
#   VLLMPagedMemHPUConnectorV2 row by row (connector/tests/test_hpu_kv_layout.py).
SPLIT, PACKED, HPU_TUPLE = "kv-split", "kv-packed", "hpu-kv-tuple"
PACKED_SINCE = (0, 26)


def layout_generation(accelerator: str, vllm_version: str) -> str:
    """The KV layout generation of an engine: what LMCache copies out of the accelerator.

    + accelerator: nvidia | gaudi. + vllm_version: the profile's vLLM, e.g. "0.25.1"
    """
    if accelerator == "gaudi":
        return HPU_TUPLE
    parts = tuple(int(p) for p in str(vllm_version).split(".")[:2] if p.isdigit())
    return PACKED if parts >= PACKED_SINCE else SPLIT


@dataclass(frozen=True)
class Namespace:
    """Every input that changes a chunk object's bytes (or which chunk it is)."""

    model: str  # kvceph_model: the weights' id
    revision: str  # kvceph_model_revision, else the served directory, else "-"
    kv_dtype: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    chunk_size: int
    layout: str  # layout_generation()
    serde: str  # kvceph_lmcache_remote_serde
    kv_flags: str  # the other KV-affecting engine flags (kv_flags.describe without PP)
    # "" in-process; MP mode: "mp-lmcache<major.minor>" (LMCache's server names its keys itself,
    # <model>@<kv_rank>@<group>@<blake3>, so its objects never share names with in-process ones)
    mode: str = ""

    @property
    def group(self) -> str:
        """``kv/<model>@tp<TP>@pp<PP>@``: what every namespace of the cache group starts with."""
        words = [self.model, f"tp{self.tensor_parallel_size}", f"pp{self.pipeline_parallel_size}"]
        return ROOT + "".join(_quote(w) + "@" for w in words)

    @property
    def prefix(self) -> str:
        """``kv/<fields>/``: the names' prefix (injective: each field quoted, '/' and '@' too)."""
        words = [self.revision, self.kv_dtype, f"c{self.chunk_size}", self.layout, self.serde]
        # The mode is appended only in MP: in-process names stay what they were (no cold start).
        tail = [self.kv_flags, *([self.mode] if self.mode else [])]
        return self.group + "@".join(_quote(w) for w in [*words, *tail]) + "/"


def _quote(word) -> str:
    return quote(str(word), safe="-._~")


def pipeline_parallel_size(me: HostSettings) -> int:
    """``--pipeline-parallel-size`` of the profile's extra_args (1 when unset)."""
    value = dict(kv_flags.normalise(me.engine.profile.extra_args)).get(
        "--pipeline-parallel-size", "1"
    )
    return int(value) if str(value).isdigit() else 1


def of(me: HostSettings) -> Namespace:
    """The namespace of one inference host's engines."""
    e, src = me.engine, me.engine.source
    served = e.serve_model if e.serve_model != src.name else ""
    return Namespace(
        model=src.name,
        revision=src.revision or served or "-",
        kv_dtype=e.kv_dtype,
        tensor_parallel_size=e.tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size(me),
        chunk_size=me.lmcache.chunk_size,
        layout=layout_generation(e.accelerator, e.profile.vllm_version),
        serde=me.lmcache.remote_serde,
        kv_flags=kv_flags.describe(_without_pp(e.profile.extra_args)),  # PP has its own field
        mode=mp_mode(e.profile.lmcache_version) if e.profile.mp else "",
    )


def mp_mode(lmcache_version: str) -> str:
    """The namespace's mode field in MP: LMCache's MP key format is its server's, per minor.

    + lmcache_version: the profile's LMCache, e.g. "0.5.6"
    """
    return "mp-lmcache" + ".".join(str(lmcache_version).split(".")[:2])


def _without_pp(args) -> list[str]:
    """extra_args as ``--flag=value`` words with the pipeline split left out."""
    return [f"{f}={v}" for f, v in kv_flags.normalise(args) if f != "--pipeline-parallel-size"]


def prefix(me: HostSettings) -> str:
    """What kvceph's connector puts before every name of this host; "" for the stock one."""
    return of(me).prefix if me.lmcache.tier.connector == "kvceph" else ""


def object_prefix(me: HostSettings) -> str:
    """The prefix every object of this host's cache group starts with (the group user's grant).

    kvceph's connector: ``kv/<model>@tp@pp@``, all of the group's namespaces. The stock one:
    LMCache's ``<model>@<TP x PP>@`` at the bucket root.
    """
    if me.lmcache.tier.connector == "kvceph":
        return of(me).group
    from deploys.cluster import bucket_policy

    world = me.engine.tensor_parallel_size * pipeline_parallel_size(me)
    return bucket_policy.object_prefix(me.engine.serve_model, world)


def split(name: str) -> tuple[str, str]:
    """(namespace prefix, LMCache's name) of an object name; ("", name) at the bucket root."""
    if name.startswith(ROOT) and "/" in name[len(ROOT) :]:
        head, _, key = name[len(ROOT) :].partition("/")
        return f"{ROOT}{head}/", key
    return "", name
