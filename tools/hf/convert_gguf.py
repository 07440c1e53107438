#!/usr/bin/env python3
"""Converts a GGUF model file to a HuggingFace model directory with transformers' own GGUF loader.

    python3 tools/hf/convert_gguf.py GGUF_FILE OUT_DIR [--smollm2-tokenizer]

Writes OUT_DIR/{config.json, generation_config.json, model.safetensors (float32), tokenizer.json,
tokenizer_config.json, special_tokens_map.json}: transformers dequantizes the GGUF tensors (and undoes llama.cpp's
q/k permutation), builds the fast tokenizer from the GGUF vocabulary and merges, and save_pretrained writes them.

--smollm2-tokenizer: transformers' GGUF tokenizer conversion (4.57) treats SmolLM2's GPT-2-style vocabulary as a
Llama (SentencePiece-style) one: byte_fallback on, a ByteFallback/Fuse/Replace decoder, a post-processor that
prepends <|im_start|>, eos_token <|im_start|>, and the chat template in a separate chat_template.jinja. This flag
puts back the layout of the published SmolLM2 tokenizer (byte-level BPE without byte fallback, ByteLevel decoder and
post-processor, bos <|im_start|>, eos and pad <|im_end|>, GPT2Tokenizer, the chat template in tokenizer_config.json).
Vocabulary, merges and added tokens stay exactly as converted, so token ids are unchanged; the result is checked by
reloading it with AutoTokenizer.

The directory is assembled in OUT_DIR.tmp and renamed into place, so an interrupted run leaves no half directory.
Needs transformers, gguf, accelerate, tokenizers, safetensors and torch importable (tools/hf/setup_assets.sh).
"""

import json
import os
import shutil
import sys


def fix_smollm2_tokenizer(d):
    tj_path = os.path.join(d, "tokenizer.json")
    with open(tj_path, encoding="utf-8") as f:
        tj = json.load(f)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tj["normalizer"] = None
    tj["pre_tokenizer"] = dict(byte_level)
    tj["post_processor"] = dict(byte_level, trim_offsets=False)
    tj["decoder"] = dict(byte_level)
    tj["model"]["byte_fallback"] = False
    tj["model"]["fuse_unk"] = False
    with open(tj_path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=2)

    template_path = os.path.join(d, "chat_template.jinja")
    tc_path = os.path.join(d, "tokenizer_config.json")
    with open(tc_path, encoding="utf-8") as f:
        tc = json.load(f)
    if os.path.exists(template_path):
        with open(template_path, encoding="utf-8") as f:
            chat_template = f.read()
        os.remove(template_path)
    else:
        chat_template = tc.get("chat_template")
    if not chat_template:
        sys.exit(f"{d}: the GGUF file has no chat template")
    special = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
               "unk_token": "<|endoftext|>"}
    tc = {
        "add_prefix_space": False,
        "added_tokens_decoder": tc["added_tokens_decoder"],
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        **special,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 8192,
        "tokenizer_class": "GPT2Tokenizer",
        "vocab_size": len(tj["model"]["vocab"]),
    }
    with open(tc_path, "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)
    with open(os.path.join(d, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(dict(special, additional_special_tokens=["<|im_start|>", "<|im_end|>"]), f, indent=2)

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    ids = tok("Hello, world!")["input_ids"]
    assert tok.eos_token_id == 2 and tok.bos_token_id == 1, (tok.eos_token_id, tok.bos_token_id)
    assert tok.convert_ids_to_tokens(ids[:1]) != ["<|im_start|>"], "a BOS is still prepended"
    assert tok.decode(ids) == "Hello, world!", tok.decode(ids)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    if len(args) != 2 or any(f != "--smollm2-tokenizer" for f in flags):
        sys.exit(__doc__)
    gguf_path, out_dir = os.path.abspath(args[0]), os.path.abspath(args[1])
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_dir, gguf_name = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if "--smollm2-tokenizer" in flags:
        fix_smollm2_tokenizer(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"wrote {out_dir}: {type(model).__name__}, {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
