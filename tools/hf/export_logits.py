#!/usr/bin/env python3
"""Loads an HF model directory that verl-cpp exported (global_step_N/actor/huggingface) with transformers, unchanged,
and writes its logits for given token ids: the Python half of tests/tools/hf/hf_export_test.cc.

    python3 tools/hf/export_logits.py MODEL_DIR INPUT_JSON OUT_DIR

INPUT_JSON: {"sequences": [[id, ...], ...], "text": str}. The model is loaded with
AutoModelForCausalLM.from_pretrained(MODEL_DIR, output_loading_info=True) and nothing else (no dtype, no config
edits), in eval mode with the eager attention; the tokenizer with AutoTokenizer.from_pretrained(MODEL_DIR).
OUT_DIR gets logits.safetensors ("logits.<i>" [T_i, vocab] float32, positions 0..T_i-1) and info.json:
model class, parameter dtype, config torch_dtype, the loading info (missing / unexpected / mismatched keys: a faithful
export has none) and the tokenizer's ids of "text" (add_special_tokens=False).
"""

import json
import os
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_dir, input_path, out_dir = sys.argv[1:4]
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    with open(input_path, encoding="utf-8") as f:
        inputs = json.load(f)
    model, loading_info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True,
                                                               attn_implementation="eager")
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tensors = {}
    with torch.no_grad():
        for i, ids in enumerate(inputs["sequences"]):
            tensors[f"logits.{i}"] = model(torch.tensor([ids])).logits[0].float().contiguous()
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "logits.safetensors"))
    info = {
        "transformers_version": transformers.__version__,
        "model_class": type(model).__name__,
        "parameter_dtype": str(next(model.parameters()).dtype),
        "config_torch_dtype": str(model.config.torch_dtype),
        "tie_word_embeddings": bool(model.config.tie_word_embeddings),
        "loading_info": {k: sorted(map(str, v)) for k, v in loading_info.items()},
        "tokenizer_class": type(tokenizer).__name__,
        "text_ids": tokenizer(inputs["text"], add_special_tokens=False)["input_ids"],
    }
    with open(os.path.join(out_dir, "info.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
