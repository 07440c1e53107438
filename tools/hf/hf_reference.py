#!/usr/bin/env python3
"""transformers' reference numbers for the HF parity tests: fp32 logits, greedy continuations, log-probs of given
responses and chat-template renderings of an HF model directory, for the inputs of a cases file.

    python3 tools/hf/hf_reference.py MODEL_DIR CASES_JSON OUT_DIR

CASES_JSON (e.g. tests/tools/hf/smollm2_cases.json) holds
  "logits":            texts; each is tokenized without special tokens and run through the model once;
  "greedy":            chat conversations; each is rendered with apply_chat_template(add_generation_prompt=True),
                       tokenized without special tokens and continued with generate(do_sample=False) for
                       "greedy_new_tokens" tokens, EOS not stopping it (eos_token_id=None), one prompt at a time;
  "logprobs":          {"prompt", "response"} texts; each is tokenized on its own (no special tokens, as verl-infer
                       does), and the log-prob of every response token given what precedes it is
                       log_softmax(logits).gather (fp32, temperature 1), as verl computes it;
  "chat":              {"messages", "add_generation_prompt"}: apply_chat_template(tokenize=False).
OUT_DIR gets reference.json (inputs, token ids and results; its "cases_sha256" is the SHA-256 of CASES_JSON) and
logits.safetensors (tensor "logits.<i>" [T_i, vocab] float32 for logits case i). Runs in float32 on the CPU with the
eager attention, one thread per core. Writes OUT_DIR.tmp and renames it into place.
"""

import hashlib
import json
import os
import shutil
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_dir, cases_path, out_dir = sys.argv[1:4]
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    torch.manual_seed(0)
    with open(cases_path, "rb") as f:
        cases_bytes = f.read()
    cases = json.loads(cases_bytes)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()

    def encode(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    out = {
        "model_dir": os.path.abspath(model_dir),
        "cases_sha256": hashlib.sha256(cases_bytes).hexdigest(),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": "float32",
        "logits": [],
        "greedy": [],
        "logprobs": [],
        "chat": [],
    }
    tensors = {}
    with torch.no_grad():
        for i, text in enumerate(cases["logits"]):
            ids = encode(text)
            logits = model(torch.tensor([ids])).logits[0].float()
            tensors[f"logits.{i}"] = logits.contiguous()
            out["logits"].append({"text": text, "ids": ids, "tensor": f"logits.{i}",
                                  "max_abs": logits.abs().max().item(),
                                  "argmax": logits.argmax(-1).tolist()})

        n_new = int(cases["greedy_new_tokens"])
        # An unset eos_token_id would be filled in from the model's generation_config: clear it there too.
        model.generation_config.eos_token_id = None
        gen_config = GenerationConfig(do_sample=False, max_new_tokens=n_new, eos_token_id=None,
                                      pad_token_id=tok.pad_token_id)
        for messages in cases["greedy"]:
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = encode(text)
            res = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 generation_config=gen_config, output_scores=True, return_dict_in_generate=True)
            new = res.sequences[0, len(ids):].tolist()
            if len(new) != n_new:
                sys.exit(f"generate returned {len(new)} tokens, wanted {n_new}")
            # The gap between the best and second-best logit at each step: how close a step was to a tie.
            margins = []
            for s in res.scores:
                top = torch.topk(s[0].float(), 2).values
                margins.append((top[0] - top[1]).item())
            out["greedy"].append({"messages": messages, "prompt_text": text, "prompt_ids": ids,
                                  "generated_ids": new, "generated_text": tok.decode(new),
                                  "top2_margins": margins})

        for case in cases["logprobs"]:
            p, r = encode(case["prompt"]), encode(case["response"])
            logits = model(torch.tensor([p + r])).logits[0].float()
            lp = torch.log_softmax(logits[len(p) - 1:-1], dim=-1)
            lps = lp.gather(-1, torch.tensor(r).unsqueeze(-1)).squeeze(-1)
            out["logprobs"].append({"prompt": case["prompt"], "response": case["response"], "prompt_ids": p,
                                    "response_ids": r, "logprobs": lps.tolist()})

    for case in cases["chat"]:
        text = tok.apply_chat_template(case["messages"], tokenize=False,
                                       add_generation_prompt=case["add_generation_prompt"])
        out["chat"].append(dict(case, text=text, ids=encode(text)))

    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_file(tensors, os.path.join(tmp, "logits.safetensors"))
    with open(os.path.join(tmp, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"wrote {out_dir}: {len(out['logits'])} logits, {len(out['greedy'])} greedy, "
          f"{len(out['logprobs'])} log-prob and {len(out['chat'])} chat cases")


if __name__ == "__main__":
    main()
