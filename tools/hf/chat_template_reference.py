#!/usr/bin/env python3
"""transformers' apply_chat_template output for the chat-template parity tests (tests/common/text).

Usage: chat_template_reference.py TESTDATA_DIR SMOLLM2_MODEL_DIR OUT_DIR

Renders every conversation of TESTDATA_DIR/chat_template_cases.json, with and without the generation prompt,
through each TESTDATA_DIR/*_tokenizer_config.json and through SmolLM2's own tokenizer_config.json (when
SMOLLM2_MODEL_DIR has one), with transformers' apply_chat_template(tokenize=False). The tokenizer is a stand-in
PreTrainedTokenizerFast whose special tokens are the config's, so the template sees the same bos_token / eos_token
/ unk_token / pad_token as with the real model. Writes OUT_DIR/reference.json:

  {"transformers": version, "cases": [{"config": absolute path, "name": str, "messages": [...],
    "add_generation_prompt": bool, "date_string": str (optional), "text": str} or {..., "error": str}]}
"""

import glob
import json
import os
import sys

import transformers
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


def token_text(value):
    if isinstance(value, dict):
        return value.get("content")
    return value


def make_tokenizer(config):
    specials = {k: token_text(config.get(k)) for k in SPECIAL if token_text(config.get(k)) is not None}
    backend = Tokenizer(models.WordLevel({"<unk-stand-in>": 0}, unk_token="<unk-stand-in>"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, **specials)


def chat_template_of(config):
    template = config["chat_template"]
    if isinstance(template, list):
        template = next(t["template"] for t in template if t.get("name") == "default")
    return template


def main():
    testdata, smollm2_dir, out_dir = sys.argv[1:4]
    configs = sorted(glob.glob(os.path.join(testdata, "*_tokenizer_config.json")))
    smollm2 = os.path.join(smollm2_dir, "tokenizer_config.json")
    if os.path.isfile(smollm2):
        configs.append(smollm2)
    with open(os.path.join(testdata, "chat_template_cases.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    cases = []
    for path in configs:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        tokenizer = make_tokenizer(config)
        template = chat_template_of(config)
        name = os.path.basename(path) if path != smollm2 else "smollm2-135m-instruct/tokenizer_config.json"
        for conv in conversations:
            for add_generation_prompt in (False, True):
                kwargs = {}
                if "date_string" in conv:
                    kwargs["date_string"] = conv["date_string"]
                case = {"config": os.path.abspath(path), "name": name, "messages": conv["messages"],
                        "add_generation_prompt": add_generation_prompt, **kwargs}
                try:
                    case["text"] = tokenizer.apply_chat_template(
                        conv["messages"], chat_template=template, tokenize=False,
                        add_generation_prompt=add_generation_prompt, **kwargs)
                except Exception as e:  # the template's raise_exception, or a Jinja error: recorded, not fatal
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "reference.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
    os.replace(tmp, os.path.join(out_dir, "reference.json"))
    print(f"wrote {len(cases)} chat-template cases from {len(configs)} templates to {out_dir}/reference.json")


if __name__ == "__main__":
    main()
