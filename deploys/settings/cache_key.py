"""The settings that form LMCache's object keys: the one list every check reads.

LMCache names an object by the model argument, the workers (tensor-parallel size), the KV
dtype, the chunk size and the prefix hash (its algorithm and, for ``builtin``, PYTHONHASHSEED);
kvceph adds the bucket and endpoint it writes to, the vLLM minor (its KV layout) and which
weights the model argument is, and the engine flags that change what a key's KV means
(``kv_flags.py``). Three things read this list: the inventory check (every setting
but the group's own model and TP must agree inside a cache group), the inference-config warning
(a change on a host orphans its cached objects) and the ``CacheKeyInUse`` fact (which lines of
the engine's files to read back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deploys.settings import kv_flags, namespace

if TYPE_CHECKING:
    from deploys.settings import HostSettings


@dataclass(frozen=True)
class KeySetting:
    """One setting in the object keys."""

    #: the group_data key that sets it
    key: str
    #: its value from a host's settings
    get: Callable[[HostSettings], Any]
    #: its name in the engine's files as ``CacheKeyInUse`` reads it back (lmcache.yaml key,
    #: vllm.env variable, or a field of the unit's ExecStart), or None when not written there
    in_files: str | None = None
    #: True for the two settings that name the cache group (model, TP): they differ between
    #: groups by definition, so they are not compared inside one
    names_group: bool = False


SETTINGS = (
    KeySetting("kvceph_kv_dtype", lambda h: h.engine.kv_dtype, "kv_dtype"),
    KeySetting("kvceph_lmcache_chunk_size", lambda h: h.lmcache.chunk_size, "chunk_size"),
    KeySetting(
        "kvceph_lmcache_hash_algorithm",
        lambda h: h.lmcache.hash_algorithm,
        "pre_caching_hash_algorithm",
    ),
    KeySetting("kvceph_python_hash_seed", lambda h: h.engine.python_hash_seed, "PYTHONHASHSEED"),
    KeySetting("kvceph_lmcache_remote_serde", lambda h: h.lmcache.remote_serde),
    KeySetting("kvceph_s3_bucket", lambda h: h.s3.bucket),
    KeySetting("kvceph_s3_endpoint", lambda h: h.s3.endpoint),
    KeySetting("kvceph_engine_profile.vllm_version", lambda h: h.engine.profile.vllm_minor),
    # In process LMCache names objects its way, its MP server another (docs/design.md "MP mode").
    KeySetting("kvceph_engine_profile.mode", lambda h: h.engine.profile.mode),
    # Not in the key, yet they change what its KV means (quantization, dtype, PP, LoRA ...).
    KeySetting(
        "kvceph_engine_profile.extra_args (KV-affecting flags)",
        lambda h: kv_flags.describe(h.engine.profile.extra_args),
    ),
    # The serve argument is in every key; the source and revision decide which weights it is.
    KeySetting("kvceph_model_source", lambda h: h.engine.source.source),
    KeySetting("kvceph_model_revision", lambda h: h.engine.source.revision),
    KeySetting("kvceph_model_path", lambda h: h.engine.serve_model),
    # kvceph's connector names objects in the namespace folder, the stock one at the root.
    KeySetting("kvceph_lmcache_connector", lambda h: h.lmcache.tier.connector),
    # All of the above that change the bytes, as the connector reads it (namespace.py): a
    # change is a new namespace, the group starts cold.
    KeySetting("kvceph namespace", namespace.prefix, "kvceph.namespace"),
    KeySetting("kvceph_model", lambda h: h.engine.model, "model", names_group=True),
    KeySetting(
        "kvceph_tensor_parallel_size",
        lambda h: h.engine.tensor_parallel_size,
        "tensor_parallel_size",
        names_group=True,
    ),
)

#: What must agree inside a cache group, or keys differ and nodes never reuse each other's cache.
# kvceph_lmcache_connector too: kvceph's connector names objects in its namespace folder, the
# stock one at the bucket root, so a group of both would never share its cache.
GROUP_INVARIANTS = tuple(s for s in SETTINGS if not s.names_group)
#: (name in the engine's files, group_data key) of every setting the engine's files carry.
IN_FILES = tuple((s.in_files, s.key) for s in SETTINGS if s.in_files)

# Where CacheKeyInUse finds each one: lmcache.yaml keys, the env file's variable, the argv.
LMCACHE_YAML_KEYS = ("chunk_size", "pre_caching_hash_algorithm")
LMCACHE_EXTRA_KEYS = ("kvceph.namespace",)  # under extra_config (two spaces in)
ENV_VARIABLE = "PYTHONHASHSEED"
ARGV_FLAGS = {"--tensor-parallel-size": "tensor_parallel_size", "--kv-cache-dtype": "kv_dtype"}
ARGV_MODEL = "model"  # the word after ``serve``
