#!/bin/bash
# The lab's model directory, on the controller: what kvceph mirrors into Ceph and every lab
# inference host serves (kvceph_model_source mirror, group_data/lab.py). Config and tokenizer
# files only: the lab engine reads them at start (lab/engine/src/kvceph_lab_engine/model_dir.py),
# so a broken staging refuses to start like vLLM does.
# usage: lab/model.sh DIR   (idempotent: the same bytes every time, so the mirror's manifest
# never changes under a running lab)
set -euo pipefail
DIR=${1:?usage: lab/model.sh DIR}
mkdir -p "$DIR"
# 1 layer x 1 KV head x head_dim 32 x 2 (K, V) x 2 bytes (bf16) = 128 bytes of KV per token,
# the lab's LAB_KV_BYTES_PER_TOKEN; the vocabulary is the lab tokenizer's.
cat >"$DIR/config.json" <<'JSON'
{
 "architectures": ["Qwen3ForCausalLM"],
 "model_type": "qwen3",
 "num_hidden_layers": 1,
 "num_attention_heads": 1,
 "num_key_value_heads": 1,
 "head_dim": 32,
 "hidden_size": 32,
 "max_position_embeddings": 40960,
 "vocab_size": 151936,
 "torch_dtype": "bfloat16"
}
JSON
cat >"$DIR/tokenizer.json" <<'JSON'
{"version": "1.0", "model": {"type": "kvceph-lab-words", "vocab_size": 151936}}
JSON
cat >"$DIR/tokenizer_config.json" <<'JSON'
{"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 40960}
JSON
echo "lab model directory: $DIR"
