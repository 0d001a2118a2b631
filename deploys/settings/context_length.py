"""Whether vLLM starts with ``kvceph_max_model_len``: over the model's native context it
refuses at start (``User-specified max_model_len ... is greater than the derived
max_model_len``), after the restart, on every host of the batch. Refused before any change.

The native context comes from the model's ``config.json`` where kvceph reads one (a model
directory on the host; a mirrored model's copy on the controller, else its staged directory),
else from the known model table (deploys/tier/kv_sizing.py ``KNOWN_MODELS``). A hub model kvceph
does not know is not checked: vLLM's own refusal at start is the check. Not refused either
where the operator configured longer contexts: rope scaling in ``config.json``,
``--hf-overrides`` that set it, or ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``. Pure: no pyinfra state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deploys.tier import kv_sizing

OPT_IN = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
# The config.json fields vLLM derives its max_model_len from (the smallest present one wins:
# vllm/config/model.py _get_and_verify_max_len).
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# What an --hf-overrides must touch to change that derivation.
_OVERRIDDEN = ("rope_scaling", "rope_parameters", *LENGTH_KEYS)


def opted_in(engine) -> bool:
    """VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or true, as vLLM reads it) in the engine's environment."""
    env = {**dict(engine.profile.env), **dict(engine.extra_env)}
    return str(env.get(OPT_IN, "0")).strip().lower() in ("1", "true")


def overrides_length(args: Sequence[str]) -> bool:
    """An ``--hf-overrides`` among ``args`` that sets rope scaling or a length field
    (``--hf-overrides JSON``, ``--hf-overrides=JSON`` or ``--hf-overrides.rope_scaling...``)."""
    for i, arg in enumerate(args):
        if not arg.startswith("--hf-overrides"):
            continue
        text = arg
        if arg == "--hf-overrides" and i + 1 < len(args):
            text += " " + args[i + 1]
        if any(key in text for key in _OVERRIDDEN):
            return True
    return False


def rope_scaled(config: Mapping[str, Any]) -> bool:
    """config.json configures rope scaling (``rope_scaling``, or ``rope_parameters`` of a type
    other than ``default``)."""
    if isinstance(config.get("rope_scaling"), Mapping) and config["rope_scaling"]:
        return True
    params = config.get("rope_parameters")
    if isinstance(params, Mapping):
        kind = params.get("rope_type") or params.get("type")
        return kind not in (None, "default")
    return False


def native_from_config(config: Mapping[str, Any]) -> int | None:
    """The native context vLLM derives from config.json, or None (rope scaling configured, or
    no length field: not checked)."""
    text = config.get("text_config")
    c = text if isinstance(text, Mapping) else config
    if rope_scaled(c) or rope_scaled(config):
        return None
    lengths = [
        c[k] for k in LENGTH_KEYS if isinstance(c.get(k), int) and not isinstance(c[k], bool)
    ]
    return min(lengths) if lengths else None


def refusal(me, config: Mapping[str, Any] | None = None, where: str = "") -> str | None:
    """The one-line refusal of a host's ``kvceph_max_model_len``, or None.

    + me: the host's HostSettings (an inference host)
    + config: the model's parsed config.json, when kvceph read one; else the known model table
    + where: where ``config`` was read, for the message
    """
    e = me.engine
    if opted_in(e) or overrides_length(e.profile.extra_args):
        return None
    if config is not None:
        native = native_from_config(config)
    else:
        shape = kv_sizing.KNOWN_MODELS.get(e.model)
        native, where = (
            (shape.native_len if shape else None),
            "deploys/tier/kv_sizing.py KNOWN_MODELS",
        )
    if native is None or e.max_model_len <= native:
        return None
    return (
        f"{me.host}: kvceph_max_model_len = {e.max_model_len!r}: over the native context of "
        f"{e.model}, {native} tokens ({where}), and no rope scaling is configured: vLLM would "
        f"refuse to start; fix: use at most {native}, or configure rope scaling (config.json "
        f"rope_scaling, or --hf-overrides in kvceph_engine_profile.extra_args), or set "
        f"{OPT_IN}=1 in kvceph_extra_env"
    )
