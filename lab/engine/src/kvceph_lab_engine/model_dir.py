"""The model argument, read as vLLM reads it: a local directory's config and tokenizer files,
or a hub id (which fails offline, as the real engine does without a cached copy).

A lab model directory (made by lab/model.sh) holds:
- config.json: a Hugging Face config (model_type, vocab_size, ...);
- tokenizer.json: {"model": {"type": "kvceph-lab-words", "vocab_size": N}} -- the lab tokenizer
  (tokenizer.py) with its vocabulary size, which must equal config.json's vocab_size;
- tokenizer_config.json.
A directory missing one of them, or holding a broken one, refuses to start with vLLM's
(transformers') error: a broken staging shows at the engine, not at the first request.
"""

from __future__ import annotations

import json
import os

from kvceph_lab_engine import tokenizer

TOKENIZER_TYPE = "kvceph-lab-words"


class ModelError(Exception):
    """The model cannot be loaded; the message is the real engine's."""


def is_local(model: str) -> bool:
    return model.startswith(("/", "./")) or os.path.isdir(model)


def _json(path: str, missing: str) -> dict:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ModelError(missing) from None
    except (OSError, ValueError):
        raise ModelError(
            f"OSError: It looks like the config file at '{path}' is not a valid JSON file."
        ) from None
    if not isinstance(data, dict):
        raise ModelError(
            f"OSError: It looks like the config file at '{path}' is not a valid JSON file."
        )
    return data


def load(model: str, environ=os.environ) -> dict | None:
    """The model directory's config.json (checked with its tokenizer), None for a hub id."""
    if not is_local(model):
        if environ.get("HF_HUB_OFFLINE") in ("1", "true", "True", "YES", "yes"):
            # The lab has no hub cache: offline, a hub id can never be found.
            raise ModelError(
                f"OSError: We couldn't connect to 'https://huggingface.co' to load the files, and "
                f"couldn't find them in the cached files. Check your internet connection or see "
                f"how to run the library in offline mode. (model {model!r}, HF_HUB_OFFLINE=1)"
            )
        return None
    config = _json(
        os.path.join(model, "config.json"),
        f"OSError: {model} does not appear to have a file named config.json. Checkout "
        f"'https://huggingface.co/{model}/tree/None' for available files.",
    )
    no_tokenizer = (
        f"OSError: Can't load tokenizer for '{model}'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the "
        f"same name. Otherwise, make sure '{model}' is the correct path to a directory "
        "containing all relevant files for a PreTrainedTokenizerFast tokenizer."
    )
    _json(os.path.join(model, "tokenizer_config.json"), no_tokenizer)
    spec = _json(os.path.join(model, "tokenizer.json"), no_tokenizer).get("model")
    kind = spec.get("type") if isinstance(spec, dict) else None
    vocab = spec.get("vocab_size") if isinstance(spec, dict) else None
    if kind != TOKENIZER_TYPE or vocab != tokenizer.VOCAB_SIZE:
        raise ModelError(
            f"ValueError: {model}/tokenizer.json: tokenizer {kind!r} with {vocab!r} tokens; the "
            f"lab engine implements only {TOKENIZER_TYPE!r} with {tokenizer.VOCAB_SIZE} tokens"
        )
    if config.get("vocab_size") != vocab:
        raise ModelError(
            f"ValueError: {model}: config.json vocab_size {config.get('vocab_size')!r} differs "
            f"from the tokenizer's {vocab}"
        )
    return config
