#!/usr/bin/env python3
"""transformers' bfloat16 and float32 logits of SmolLM2-135M-Instruct on the same inputs, for the bf16 parity test
(tests/tools/hf/bf16_parity_test.cc).

    python3 tools/hf/bf16_reference.py MODEL_DIR REFERENCE_JSON OUT_DIR

REFERENCE_JSON is hf_reference.py's reference.json; its token ids are reused: every "logits" case and the prompts of
"greedy" cases 0 and 6 (chat-formatted, one with a system message). For each sequence i the model is run twice on the
CPU with the eager attention, loaded with dtype=torch.float32 and with dtype=torch.bfloat16 (transformers' own bf16
path: bf16 weights and activations, softmax and RMSNorm variance in float32 as its Llama code does), and OUT_DIR gets
logits.safetensors with "fp32.<i>" [T_i, vocab] float32 and "bf16.<i>" [T_i, vocab] bfloat16 (the bf16 run's
logits as it returns them), and reference.json {"sequences": [ids...], "bf16_vs_fp32_max_abs": [...]}.
Writes OUT_DIR.tmp and renames it into place.
"""

import json
import os
import shutil
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_dir, ref_path, out_dir = sys.argv[1:4]
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    with open(ref_path, encoding="utf-8") as f:
        ref = json.load(f)
    sequences = [c["ids"] for c in ref["logits"]] + [ref["greedy"][i]["prompt_ids"] for i in (0, 6)]
    tensors, diffs = {}, []
    logits = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            for i, ids in enumerate(sequences):
                out = model(torch.tensor([ids])).logits[0]
                assert out.dtype == dtype, out.dtype
                logits[(name, i)] = out
                tensors[f"{name}.{i}"] = out.contiguous()
        del model
    for i in range(len(sequences)):
        diffs.append((logits[("bf16", i)].float() - logits[("fp32", i)]).abs().max().item())
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_file(tensors, os.path.join(tmp, "logits.safetensors"))
    with open(os.path.join(tmp, "reference.json"), "w", encoding="utf-8") as f:
        json.dump({"transformers_version": transformers.__version__, "torch_version": torch.__version__,
                   "sequences": sequences, "bf16_vs_fp32_max_abs": diffs}, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"wrote {out_dir}: {len(sequences)} sequences; transformers bf16 vs fp32 max |diff| {diffs}")


if __name__ == "__main__":
    main()
