#!/usr/bin/env python3
"""BENCHMARKS.md B2, training throughput on one GPU: our actor update (verl-bench-update) against the same update in
PyTorch eager with the HF model, on the same model files and shapes, in the same run; MFU as verl defines it.

The update: `--sequences` random sequences of `--prompt-len` + `--response-len` tokens, PPO clip loss (0.2) + KL loss
(low_var_kl, 0.001) against stored ref log-probs, token-mean, entropy computed with gradients (as our update does),
one AdamW step over the whole batch in micro-batches of `--micro` sequences, grad clip 1.0, bf16. The baseline keeps
bf16 parameters and AdamW state in bf16 (plain torch.optim.AdamW); ours keeps float32 master weights and moments.
Where the baseline's micro-batch does not fit the card (micro-batches of 32 peak at 100 GB: an H200 holds them, an
80 GB H100 does not), it runs again with half as many sequences per micro-batch until one fits; the update's result
does not depend on the split, and the JSON names the micro-batch it ran with and the sizes that did not fit.

Runs on the GPU machine (its python3 has torch and transformers); makes bench-0.5b with verl-make-tiny-model.

usage: b2_update.py --build-dir build-cuda --out FILE.json [--sequences 512] [--prompt-len 256] [--response-len 512]
                    [--micro 8] [--repeats 2] [--skip-baseline]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

from gpu_bench_common import machine, make_bench_model, provenance

PEAK_FLOPS = 989e12  # H200 bf16 dense, verl's figure


def flops(cfg, batch_seqlens):
    """verl's FlopsCounter for Qwen2: 6 * dense params * tokens + 12 * sum(seqlen^2) * head_dim * heads * layers."""
    h, v, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    heads, kv_heads, inter = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    head_dim = h // heads
    mlp = h * inter * 3
    attn_linear = h * (heads * head_dim + 2 * kv_heads * head_dim + heads * head_dim)
    dense = (mlp + attn_linear) * layers + v * h * 2
    tokens = sum(batch_seqlens)
    return 6 * dense * tokens + 12 * sum(s * s for s in batch_seqlens) * head_dim * heads * layers


def run_baseline(model_dir, n, prompt_len, response_len, micro, repeats):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    model.train()
    vocab = model.config.vocab_size
    seq = prompt_len + response_len
    ids = torch.randint(0, vocab, (n, seq), device="cuda")
    responses = ids[:, prompt_len:]
    uniform = -torch.log(torch.tensor(float(vocab))).item()
    old_lp = torch.randn(n, response_len, device="cuda") * 0.1 + uniform
    ref_lp = torch.randn(n, response_len, device="cuda") * 0.1 + uniform
    adv = torch.randn(n, response_len, device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)

    def update():
        opt.zero_grad(set_to_none=True)
        total = n * response_len
        for b in range(0, n, micro):
            logits = model(input_ids=ids[b:b + micro]).logits[:, prompt_len - 1:-1].float()
            logp = logits.log_softmax(-1)
            lp = logp.gather(-1, responses[b:b + micro].unsqueeze(-1)).squeeze(-1)
            entropy = torch.logsumexp(logits, -1) - (logits.softmax(-1) * logits).sum(-1)
            ratio = torch.exp(lp - old_lp[b:b + micro])
            a = adv[b:b + micro]
            pg = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.2))
            kl = ref_lp[b:b + micro] - lp
            low_var_kl = (torch.exp(kl) - kl - 1).clamp(-10, 10)
            loss = (pg.sum() + 0.001 * low_var_kl.sum() - 0.0 * entropy.sum()) / total
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return norm.item()

    update()  # warm-up (an out-of-memory error here lets the caller retry with a smaller micro-batch)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        norm = update()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    import transformers
    tokens = n * seq
    return {"engine": "pytorch-eager-hf", "transformers": transformers.__version__, "torch": torch.__version__,
            "attn": "sdpa", "optimizer": "torch.optim.AdamW on bf16 parameters", "micro_batch": micro, "seconds": seconds,
            "best_seconds": min(seconds), "tokens": tokens, "tokens_per_s": tokens / min(seconds),
            "peak_memory_allocated_gb": torch.cuda.max_memory_allocated() / 2**30, "grad_norm": norm}


def run_baseline_fitting(model_dir, n, prompt_len, response_len, micro, repeats):
    """run_baseline at `micro` sequences per micro-batch, halving it while the card runs out of memory."""
    import gc
    import torch
    too_large = []
    while True:
        try:
            res = run_baseline(model_dir, n, prompt_len, response_len, micro, repeats)
            res["micro_batches_out_of_memory"] = too_large
            return res
        except torch.OutOfMemoryError:
            if micro == 1:
                raise
        too_large.append(micro)  # outside the handler, so the failed try's tensors are no longer referenced
        gc.collect()
        torch.cuda.empty_cache()
        print(f"baseline: micro-batches of {micro} do not fit this card; trying {micro // 2}", file=sys.stderr)
        micro //= 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build-cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sequences", type=int, default=512)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--response-len", type=int, default=512)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--ours-flags", default="", help="more verl-bench-update flags for ours, e.g. '--max-token-len 24576'")
    ap.add_argument("--variant", action="append", default=[], help="also run ours with these flags (repeatable)")
    args = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build_dir), "bin")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "bench-0.5b")
        make_bench_model(bin_dir, model_dir)
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        shape = ["--sequences", str(args.sequences), "--prompt-len", str(args.prompt_len), "--response-len",
                 str(args.response_len), "--micro", str(args.micro)]
        def run_ours(flags):
            r = subprocess.run([f"{bin_dir}/verl-bench-update", "--model", model_dir, "--repeats", str(args.repeats)] +
                               shape + flags.split(), capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"verl-bench-update {flags} failed: {r.stderr}")
            res = json.loads(r.stdout.strip().splitlines()[-1])
            res["flags"] = flags
            print(json.dumps(res), file=sys.stderr)
            return res
        ours = run_ours(args.ours_flags)
        variants = [run_ours(v) for v in args.variant]
        baseline = None
        if not args.skip_baseline:
            baseline = run_baseline_fitting(model_dir, args.sequences, args.prompt_len, args.response_len,
                                            args.micro, args.repeats)
            print(json.dumps(baseline), file=sys.stderr)
    seq = args.prompt_len + args.response_len
    f = flops(cfg, [seq] * args.sequences)
    for res in [ours, baseline] + variants:
        if res:
            res["mfu"] = f / (PEAK_FLOPS * res["best_seconds"])
    result = {
        "benchmark": "B2",
        "date": datetime.date.today().isoformat(),
        **provenance(),
        "machine": machine(),
        "config": {"model": "bench-0.5b (random, Qwen2.5-0.5B shape)", "dtype": "bfloat16",
                   "sequences": args.sequences, "prompt_len": args.prompt_len, "response_len": args.response_len,
                   "micro_batch": args.micro, "loss": "ppo clip 0.2 + low_var_kl 0.001, token-mean",
                   "optimizer_steps_per_update": 1, "flops_per_update": f, "peak_flops": PEAK_FLOPS},
        "ours": ours,
        "baseline": baseline,
        "unit": "tokens/s",
        "ratio": ours["tokens_per_s"] / baseline["tokens_per_s"] if baseline else None,
        "mfu": ours["mfu"],
        "max_memory_allocated_gb": {"ours": ours.get("peak_memory_allocated_gb"),
                                    "baseline": baseline["peak_memory_allocated_gb"] if baseline else None},
        "variants": variants,
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")
    print(json.dumps({k: result[k] for k in ("ratio", "mfu")}))


if __name__ == "__main__":
    main()
