"""Where an engine's weights come from: the hub, a directory on the host, or the Ceph mirror.

Pure module (no pyinfra): settings loads ``ModelSource`` here, and the unit rendering asks it
for the ``vllm serve`` argument, the model flags and the model environment, so every decision
about the model lives in one place.

The ``vllm serve`` argument is part of every LMCache object key, so every host of a cache group
serves from the same argument: ``path`` and ``mirror`` serve one fixed local directory (for the
mirror it contains the revision) and keep the client-facing name with --served-model-name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deploys.settings.reader import ABSOLUTE_PATH

SOURCES = ("hub", "path", "mirror")
# A Hugging Face commit hash: branch and tag names move under a running cache group.
_REVISION = r"[0-9a-f]{40}"
# A hub model id (org/name); it becomes a directory and a key prefix in the mirror.
_NAME_PART = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"
_MIRROR_NAME = rf"{_NAME_PART}(/{_NAME_PART})?"
# No "@": LMCache joins its key fields with "@" and splits them again (CacheEngineKey), so the
# serve argument -- the key's model field -- must not contain one.
DEFAULT_ROOT = "/var/lib/kvceph/models"
DEFAULT_BUCKET = "kvceph-models"
# The mirror's RGW users: the owner writes (its keys never leave the Ceph admin host), the
# reader's read-only key is the inference hosts' (KVCEPH_MODELS_ACCESS_KEY / _SECRET_KEY).
DEFAULT_OWNER = "kvceph-models"
DEFAULT_READER = "kvceph-models-reader"
# Written last into the mirror and into a staged directory: its presence means "complete".
MANIFEST = "kvceph-manifest.json"


@dataclass(frozen=True)
class ModelSource:
    source: str  # hub | path | mirror
    name: str  # kvceph_model: the client-facing name (hub: also the serve argument)
    revision: str | None
    path: str | None  # the local directory served (path, mirror); None for the hub
    mirror_bucket: str = DEFAULT_BUCKET
    mirror_from: str | None = None  # controller directory uploaded once into the mirror
    mirror_owner: str = DEFAULT_OWNER
    mirror_reader: str = DEFAULT_READER

    @property
    def serve_argument(self) -> str:
        """The ``vllm serve`` argument (part of every LMCache key)."""
        return self.path or self.name

    @property
    def mirror_prefix(self) -> str:
        """Key prefix of this model in the mirror bucket, e.g. ``models/Qwen/Qwen3-32B@<rev>/``."""
        return mirror_prefix(self.name, self.revision or "")


HUB_DEFAULT = ModelSource("hub", "Qwen/Qwen3-32B", None, None)


def mirror_prefix(name: str, revision: str) -> str:
    return f"models/{name}@{revision}/"


def local_path(root: str, name: str, revision: str) -> str:
    """The fixed directory a mirrored model is served from on every host (no "@")."""
    return f"{root.rstrip('/')}/{name}/{revision}"


def load(r, name: str) -> ModelSource:
    """Read the ``kvceph_model_*`` keys of one inference host (``r``: settings' reader)."""
    if "@" in name:
        # Whatever the source: LMCache splits its object keys on "@" (see _PATH).
        raise r.fail(
            "kvceph_model", name, "contains '@', which LMCache splits its object keys on",
            "drop the '@...' part (pin a version with kvceph_model_revision)",
        )  # fmt: skip
    directory = name.startswith("/")
    if not (
        re.fullmatch(ABSOLUTE_PATH, name) and ".." not in name.split("/")
        if directory
        else re.fullmatch(_MIRROR_NAME, name) and ".." not in name
    ):
        # It lands in the engine's argv and every object key: a space would add a vLLM flag,
        # an invisible character another cache group.
        raise r.fail(
            "kvceph_model", name,
            "is neither a model id (org/name of letters, digits, _ . -) nor an absolute directory",
            "use the model's id, e.g. Qwen/Qwen3-32B; vLLM flags go in "
            "kvceph_engine_profile.extra_args",
        )  # fmt: skip
    source = r.choice("kvceph_model_source", "hub", SOURCES)
    revision = r.opt_str("kvceph_model_revision")
    if revision is not None and not re.fullmatch(_REVISION, revision):
        raise r.fail(
            "kvceph_model_revision",
            revision,
            "is not a commit hash (a branch or tag moves under a running cache group)",
            "use the model's 40-hex-digit commit, e.g. from huggingface.co/<model>/commits/main",
        )
    given_path = r.opt_str("kvceph_model_path")
    bucket = r.str("kvceph_model_mirror_bucket", DEFAULT_BUCKET)
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", bucket):
        raise r.fail(
            "kvceph_model_mirror_bucket", bucket, "is not a bucket name", "use e.g. kvceph-models"
        )
    if source == "hub":
        if given_path is not None:
            raise r.fail(
                "kvceph_model_path", given_path, "is only read with kvceph_model_source path",
                "remove it, or set kvceph_model_source = 'path'",
            )  # fmt: skip
        if revision is not None and name.startswith("/"):
            raise r.fail(
                "kvceph_model_revision", revision, f"means nothing for the directory {name}",
                "remove it, or serve the directory with kvceph_model_source = 'path'",
            )  # fmt: skip
        return ModelSource("hub", name, revision, None, bucket)
    if name.startswith("/"):
        raise r.fail(
            "kvceph_model", name, f"is the client-facing name with kvceph_model_source {source}",
            "put the model id there (e.g. Qwen/Qwen3-32B) and the directory in kvceph_model_path",
        )  # fmt: skip
    if source == "path":
        if given_path is None or not re.fullmatch(ABSOLUTE_PATH, given_path) or ".." in given_path:
            raise r.fail(
                "kvceph_model_path", given_path, "must be an absolute directory on the host",
                "give the model directory (letters, digits, / . _ -), e.g. /mnt/models/Qwen3-32B",
            )  # fmt: skip
        return ModelSource("path", name, revision, given_path.rstrip("/"), bucket)
    # mirror
    if given_path is not None:
        raise r.fail(
            "kvceph_model_path", given_path, "is derived with kvceph_model_source mirror",
            "remove it (the directory is kvceph_model_dir/<model>/<revision>)",
        )  # fmt: skip
    if revision is None:
        raise r.fail(
            "kvceph_model_revision", None, "is required with kvceph_model_source mirror",
            "set the commit hash the mirror holds",
        )  # fmt: skip
    root = r.path("kvceph_model_dir", DEFAULT_ROOT)
    owner = r.uid("kvceph_model_mirror_owner", DEFAULT_OWNER)
    reader = r.uid("kvceph_model_mirror_reader", DEFAULT_READER)
    if owner == reader:
        raise r.fail(
            "kvceph_model_mirror_reader", reader, "equals kvceph_model_mirror_owner",
            "give the read-only reader its own RGW user",
        )  # fmt: skip
    return ModelSource(
        "mirror",
        name,
        revision,
        local_path(root, name, revision),
        bucket,
        mirror_from=r.opt_str("kvceph_model_mirror_from"),
        mirror_owner=owner,
        mirror_reader=reader,
    )


# S3 object keys are at most 1024 bytes (UTF-8). LMCache 0.5.6 names an object
# "<model>@<world size>@<worker>@<chunk hash hex>@<dtype>" (versions._KEY_FORMAT_056), the model
# being vLLM's model argument: up to 2 + 2 + 64 + 16 bytes and four "@" after it, 128 kept.
MAX_MODEL_KEY_BYTES = 1024 - 128


def check_key_length(r, source: ModelSource) -> None:
    """The model argument leaves LMCache's object keys within S3's 1024 bytes."""
    argument = source.serve_argument
    if len(argument.encode()) > MAX_MODEL_KEY_BYTES:
        key = "kvceph_model_path" if source.source == "path" else "kvceph_model"
        shown = argument if key == "kvceph_model_path" else source.name
        raise r.fail(
            key,
            shown[:40] + "...",
            f"makes the model argument {len(argument.encode())} bytes long; LMCache's object "
            f"keys carry it, and S3 keys end at 1024 bytes",
            f"keep the model argument within {MAX_MODEL_KEY_BYTES} bytes",
        )


def unpinned_refusal(src: ModelSource) -> str | None:
    """Preflight's refusal for a hub source without a commit, or None.

    Without ``--revision`` vLLM downloads the newest weights: a node replaced after the model's
    repository moved writes the new weights' KV under the object names its peers read as
    theirs, and they load it as their own. A directory (``path``, or a directory as the model)
    is the operator's to keep equal; a mirror always names its commit.
    """
    if src.source != "hub" or src.revision or src.name.startswith("/"):
        return None
    return (
        f"kvceph_model_revision = None: the hub model {src.name} is not pinned: a replaced node "
        "would download the newest weights and write their KV under the object names its peers "
        "load as theirs; fix: set kvceph_model_revision to the commit you serve (40 hex digits, "
        f"huggingface.co/{src.name}/commits/main), or serve a mirror or a directory"
    )


def mirror_users(sources) -> tuple[str, str, str] | None:
    """(bucket, owner, reader) shared by every mirrored engine, or None when none mirrors.

    Raises ValueError (one line) when they differ: one Ceph holds one mirror.
    """
    seen = {
        (s.mirror_bucket, s.mirror_owner, s.mirror_reader) for s in sources if s.source == "mirror"
    }
    if len(seen) > 1:
        raise ValueError(
            f"inventory: kvceph_model_mirror_bucket/_owner/_reader = {sorted(seen)!r}: the "
            "mirrored hosts disagree; fix: set them once in group_data/all.py"
        )
    return seen.pop() if seen else None


def serve_flags(src: ModelSource) -> list[str]:
    """The model flags of ``vllm serve`` after its argument."""
    if src.source == "hub":
        # The tokenizer is pinned to the same commit: vLLM loads it separately.
        return (
            ["--revision", src.revision, "--tokenizer-revision", src.revision]
            if src.revision
            else []
        )
    # A directory: keys use the directory, clients keep the model's name.
    return ["--served-model-name", src.name]


def environment(src: ModelSource) -> list[tuple[str, str]]:
    """The model's unit environment: a local directory never reaches for the hub."""
    if src.source == "hub":
        return []
    return [("HF_HUB_OFFLINE", "1")]
