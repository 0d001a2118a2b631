"""The engine flags in ``kvceph_engine_profile.extra_args`` that change what the KV means.

Pure module. LMCache's object key names the model argument, the workers, the KV dtype and the
prefix hash, but not the weights' quantization, their dtype, the pipeline split, config
overrides (RoPE scaling) or LoRA: two engines of one cache group that differ there write
different KV under the same object names, and each loads the other's as its own. The cache-
group check (``settings/cache_key.py``) therefore compares these flags, normalised so that
spellings vLLM takes as equal compare equal (``-q fp8`` / ``--quantization=FP8``,
``--dtype half`` / ``--dtype float16``, JSON key order, a default written out).
"""

from __future__ import annotations

import json

# vLLM's flags (vllm/engine/arg_utils.py, 0.26 - 0.33) whose value changes the KV of a token.
KV_FLAGS = (
    "--quantization",  # weights (and with it activations, hence KV)
    "--dtype",  # model dtype: the KV's values unless --kv-cache-dtype (kvceph's own) says more
    "--pipeline-parallel-size",  # LMCache's worker split (world size in the key)
    "--hf-overrides",  # config overrides: RoPE scaling, layer counts ...
    "--rope-scaling",  # older vLLM's spelling of the same
    "--rope-theta",
    "--enable-lora",  # adapters change the KV of requests that use them
    "--lora-modules",
    "--max-lora-rank",
    "--load-format",  # "dummy" serves random weights
    "--quantization-param-path",  # fp8 KV scales
    "--calculate-kv-scales",
    "--revision",  # kvceph_model_revision's job; here it would change the weights unseen
    "--code-revision",
)
ALIASES = {"-q": "--quantization", "-pp": "--pipeline-parallel-size"}
# Flags that take no value (present = true; vLLM's --no-<flag> = false).
BOOLEAN = frozenset({"--enable-lora", "--calculate-kv-scales"})
# Flags that take several values (argparse nargs="+"): order does not matter to vLLM.
MANY = frozenset({"--lora-modules"})
# vLLM's defaults: writing one out changes nothing.
DEFAULTS = {
    "--dtype": "auto",
    "--pipeline-parallel-size": "1",
    "--enable-lora": "false",
    "--calculate-kv-scales": "false",
    "--load-format": "auto",
}
DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}
JSON_VALUED = frozenset({"--hf-overrides", "--rope-scaling"})


def _flag(word: str) -> tuple[str, str | None]:
    """``--flag_name=value`` -> (``--flag-name``, ``value``); vLLM reads ``_`` as ``-``."""
    name, eq, value = word.partition("=")
    if name in ALIASES:
        name = ALIASES[name]
    elif name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, (value if eq else None)


def _value(flag: str, value: str) -> str:
    if flag in JSON_VALUED:
        try:
            return json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return value
    if flag == "--dtype":
        return DTYPE_ALIASES.get(value.lower(), value.lower())
    if flag in ("--quantization", "--load-format") or flag in BOOLEAN:
        return value.lower()
    if flag in ("--pipeline-parallel-size", "--max-lora-rank"):
        return str(int(value)) if value.strip().isdigit() else value
    return value


def normalise(args: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """The KV-affecting flags of ``args`` as sorted (flag, value) pairs, defaults dropped.

    + args: a profile's ``extra_args``, one argument per item (``--f v`` or ``--f=v``)

    .. code:: python

        normalise(["-q", "FP8", "--dtype=half", "--max-num-seqs", "8"])
        # (("--dtype", "float16"), ("--quantization", "fp8"))
    """
    found: dict[str, str] = {}
    words = list(args)
    i = 0
    while i < len(words):
        flag, value = _flag(words[i])
        i += 1
        negated = flag.startswith("--no-") and "--" + flag[5:] in BOOLEAN
        if negated:
            flag, value = "--" + flag[5:], "false"
        if flag not in KV_FLAGS:
            continue
        if value is None and flag in BOOLEAN:
            value = "true"
        elif value is None and flag in MANY:
            many = []
            while i < len(words) and not words[i].startswith("-"):
                many.append(words[i])
                i += 1
            value = " ".join(sorted(many))
        elif value is None:
            value = words[i] if i < len(words) else ""
            i += 1
        found[flag] = _value(flag, value)  # argparse: the last one wins
    return tuple(sorted((f, v) for f, v in found.items() if DEFAULTS.get(f) != v))


def describe(args: tuple[str, ...] | list[str]) -> str:
    """The normalised KV-affecting flags as one line (``none`` when there are none)."""
    pairs = normalise(args)
    return " ".join(f"{f}={v}" for f, v in pairs) if pairs else "none"
