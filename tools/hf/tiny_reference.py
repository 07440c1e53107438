#!/usr/bin/env python3
"""Tiny random models made by transformers, with the RoPE scalings our decoder implements, and their fp32 logits.

    python3 tools/hf/tiny_reference.py OUT_DIR

Writes OUT_DIR/<name>/ (an HF model directory: config.json + model.safetensors, float32, seeded random weights) for
  llama3-rope   Llama, untied embeddings, GQA, rope_scaling {rope_type llama3, factor 8, low 1, high 4,
                original_max_position_embeddings 64}: with head_dim 16 and rope_theta 1e4 the 8 frequencies fall in all
                three bands (kept, smoothed, divided by the factor);
  qwen2-linear  Qwen2, tied embeddings, q/k/v biases, rope_scaling {type linear, factor 4};
  llama-bias    Llama with attention_bias true (q/k/v and o_proj biases), no rope scaling;
and OUT_DIR/reference.json ({"models": [{"name", "feature", "ids", "tensor", "max_abs", "feature_effect"}]}) with
OUT_DIR/logits.safetensors ("logits.<name>" [T, vocab] float32 for the model's "ids", positions 0..T-1).
"feature_effect" is how far the same weights' logits move without the feature under test (the rope_scaling; the
o_proj bias): the parity tolerance must be far below it for the test to mean anything.
Writes OUT_DIR.tmp and renames it into place.
"""

import json
import os
import shutil
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1].rstrip("/")
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0,
                  initializer_range=0.25)  # large weights: sharp attention, so positions matter
    specs = [  # name, config class, model class, config keys, what the model tests
        ("llama3-rope", LlamaConfig, LlamaForCausalLM,
         dict(head_dim=16, tie_word_embeddings=False,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}), "rope_scaling"),
        ("qwen2-linear", Qwen2Config, Qwen2ForCausalLM,
         dict(tie_word_embeddings=True, use_sliding_window=False, rope_scaling={"type": "linear", "factor": 4.0}),
         "rope_scaling"),
        ("llama-bias", LlamaConfig, LlamaForCausalLM, dict(attention_bias=True, tie_word_embeddings=False), "o_proj.bias"),
    ]
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tensors, models = {}, []
    for seed, (name, config_cls, model_cls, extra, feature) in enumerate(specs):
        torch.manual_seed(seed)
        config = config_cls(**common, **extra)
        config._attn_implementation = "eager"
        model = model_cls(config).float().eval()
        with torch.no_grad():  # transformers' init keeps norms at 1: randomize them so they are tested too
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.uniform_(0.5, 1.5)
                elif n.endswith(".bias"):
                    p.normal_(0.0, 0.1)
        model.save_pretrained(os.path.join(tmp, name), safe_serialization=True)
        g = torch.Generator().manual_seed(100 + seed)
        ids = torch.randint(3, common["vocab_size"], (1, 96), generator=g)
        with torch.no_grad():
            logits = model(ids).logits[0].float()
            if feature == "rope_scaling":
                without_config = config_cls(**common, **dict(extra, rope_scaling=None))
                without_config._attn_implementation = "eager"
                without = model_cls(without_config).float().eval()
                without.load_state_dict(model.state_dict())
            else:
                without = model_cls(config).float().eval()
                without.load_state_dict(model.state_dict())
                for n, p in without.named_parameters():
                    if n.endswith(feature):
                        p.zero_()
            logits_without = without(ids).logits[0].float()
        tensors[f"logits.{name}"] = logits.contiguous()
        models.append({"name": name, "feature": feature, "ids": ids[0].tolist(), "tensor": f"logits.{name}",
                       "max_abs": logits.abs().max().item(),
                       "feature_effect": (logits - logits_without).abs().max().item()})
    save_file(tensors, os.path.join(tmp, "logits.safetensors"))
    with open(os.path.join(tmp, "reference.json"), "w") as f:
        json.dump({"models": models}, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"wrote {out_dir}: " + ", ".join(f"{m['name']} ({m['feature']} moves logits by {m['feature_effect']:.3g})"
                                          for m in models))


if __name__ == "__main__":
    main()
