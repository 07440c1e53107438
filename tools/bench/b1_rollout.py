#!/usr/bin/env python3
"""BENCHMARKS.md B1, rollout throughput on one GPU: ours (verl-bench-rollout) against HF transformers' generate on the
same model files and shapes, in the same run, plus the memory-bandwidth roofline.

Runs on the GPU machine (tools/device: its python3 has torch and transformers). Makes bench-0.5b with
verl-make-tiny-model (the Qwen2.5-0.5B shape, random weights), then for each engine: 512 prompts of 256 random token
ids, 512 new tokens each, temperature 1.0, top-p 1.0, EOS ignored, bf16; tokens per second over the wall clock from
the first prompt in to the last token out (best of --repeats, after one warm-up run of the same batch).

usage: b1_rollout.py --build-dir build-cuda --out FILE.json [--prompts 512] [--prompt-len 256] [--new-tokens 512]
                     [--repeats 1] [--skip-hf] [--variants] [--pdl-variant] [--profile]
                     [--env-variants KEY=VALUE[,KEY=VALUE...]] [--flag-variants "--fold-norms 0[;...]"]

The JSON has benchmark, commit, machine, config, ours, baseline, unit, ratio (ours / HF), roofline_fraction and
max_memory_allocated_gb (BENCHMARKS.md; the issue's fields); --variants adds ours without CUDA graphs and with a
long tail of response lengths.
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

# The roofline's bandwidth: BENCHMARKS.md's 4.3 TB/s is the H200's device-to-device copy as measured on the GPU
# machine; an H100 (the device tool may lend one instead) copied about 3.0 TB/s there (the device library's KINDS.md).
# Keyed by the name nvidia-smi gives; another card gets no roofline fraction rather than a wrong one.
HBM_BYTES_PER_S_BY_GPU = {"NVIDIA H200": 4.3e12, "NVIDIA H100 80GB HBM3": 3.0e12}


def roofline_seconds(cfg, prompts, prompt_len, new_tokens, weight_bytes, hbm_bytes_per_s):
    """Sum over decode steps of (weights + the KV cache read at that step) / HBM bandwidth; bf16 KV."""
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_bytes_per_token = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * head_dim * 2
    total = 0.0
    for t in range(new_tokens):
        total += weight_bytes + prompts * (prompt_len + t) * kv_bytes_per_token
    return total / hbm_bytes_per_s


def run_hf(model_dir, prompts, prompt_len, new_tokens, repeats):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    model.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (prompts, prompt_len), generator=g).cuda()
    mask = torch.ones_like(ids)
    kwargs = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens,
                  min_new_tokens=new_tokens, pad_token_id=0)
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, **kwargs)  # warm-up, same batch
        torch.cuda.synchronize()
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    generated = (out.shape[1] - prompt_len) * prompts
    peak = torch.cuda.max_memory_allocated()
    import transformers
    return {"engine": "hf-transformers-generate", "transformers": transformers.__version__, "torch": torch.__version__,
            "attn": "sdpa", "seconds": seconds, "best_seconds": min(seconds), "generated_tokens": generated,
            "tokens_per_s": generated / min(seconds), "peak_memory_allocated_gb": peak / 2**30}


def run_ours(bin_dir, model, shape, repeats, extra=(), env=None):
    r = subprocess.run([os.path.join(bin_dir, "verl-bench-rollout"), "--model", model, "--device", "cuda",
                        "--dtype", "bfloat16", "--repeats", str(repeats)] + shape + list(extra),
                       capture_output=True, text=True, env=dict(os.environ, **env) if env else None)
    if r.returncode != 0:
        sys.exit(f"verl-bench-rollout {' '.join(extra)} failed: {r.stderr}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    if env:
        result["env"] = env
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build-cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--hf-repeats", type=int, default=2,
                    help="timed HF generate runs, best kept (one run varied 9.7-14.5 s between runs of one day)")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--variants", action="store_true",
                    help="also run ours with enforce_eager (no CUDA graphs), greedy (what sampling costs) and with a long tail (--eos-every 97)")
    ap.add_argument("--pdl-variant", action="store_true",
                    help="also run ours with VERL_PDL=0 (kernels launched without programmatic dependent launch; "
                         "the same as --env-variants VERL_PDL=0)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile ours (kernel time by name), with CUDA graphs and eagerly")
    ap.add_argument("--env-variants", default="",
                    help="also run ours with each KEY=VALUE in its environment (comma-separated; with --profile, "
                         "profiled too, as graphs_KEY=VALUE), e.g. VERL_PDL=0")
    ap.add_argument("--flag-variants", default="",
                    help="also run ours with each of these verl-bench-rollout flag sets (';'-separated; with --profile, "
                         "profiled too, as graphs_FLAGS), e.g. '--fold-norms 0'")
    a = ap.parse_args()
    bin_dir = os.path.join(a.build_dir, "bin")
    work = tempfile.mkdtemp(prefix="b1_")
    model = os.path.join(work, "bench-0.5b")
    make_bench_model(bin_dir, model)
    cfg = json.load(open(os.path.join(model, "config.json")))
    weight_bytes = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model)
                       if f.endswith(".safetensors"))
    if cfg.get("torch_dtype", "float32") in ("float32", "fp32"):
        weight_bytes //= 2  # the files are float32; both engines run bf16
    shape = ["--prompts", str(a.prompts), "--prompt-len", str(a.prompt_len), "--new-tokens", str(a.new_tokens)]
    ours = run_ours(bin_dir, model, shape, a.repeats)
    print(json.dumps(ours), file=sys.stderr)
    variants = []
    if a.variants:
        for extra in (["--enforce-eager", "1"], ["--greedy", "1"], ["--eos-every", "97"]):
            v = run_ours(bin_dir, model, shape, a.repeats, extra)
            print(json.dumps(v), file=sys.stderr)
            variants.append(v)
    env_variants = [dict([kv.split("=", 1)]) for kv in a.env_variants.split(",") if kv]
    if a.pdl_variant and {"VERL_PDL": "0"} not in env_variants:
        env_variants.append({"VERL_PDL": "0"})
    for env in env_variants:
        v = run_ours(bin_dir, model, shape, a.repeats, env=env)
        print(json.dumps(v), file=sys.stderr)
        variants.append(v)
    flag_variants = [f.split() for f in a.flag_variants.split(";") if f.strip()]
    for extra in flag_variants:
        v = run_ours(bin_dir, model, shape, a.repeats, extra)
        v["flags"] = " ".join(extra)
        print(json.dumps(v), file=sys.stderr)
        variants.append(v)
    profiles = {}
    if a.profile:
        for name, extra in (("graphs", ["--profile", "1"]), ("eager", ["--enforce-eager", "1", "--profile", "1"])):
            profiles[name] = run_ours(bin_dir, model, shape, 1, extra).get("profile")
        # E.g. VERL_PDL=0: a dependent kernel's time includes its wait on the kernel before, so compare without.
        for env in env_variants:
            name = "graphs_" + "_".join(f"{k}={v}" for k, v in env.items())
            profiles[name] = run_ours(bin_dir, model, shape, 1, ["--profile", "1"], env=env).get("profile")
        for extra in flag_variants:
            profiles["graphs_" + "".join(extra)] = run_ours(bin_dir, model, shape, 1, extra + ["--profile", "1"]).get("profile")
    baseline = None if a.skip_hf else run_hf(model, a.prompts, a.prompt_len, a.new_tokens, a.hf_repeats)
    host = machine()
    bandwidth = HBM_BYTES_PER_S_BY_GPU.get(host["gpu"][0] if host["gpu"] else "")
    generated = a.prompts * a.new_tokens
    roofline = None
    if bandwidth:
        limit_s = roofline_seconds(cfg, a.prompts, a.prompt_len, a.new_tokens, weight_bytes, bandwidth)
        roofline = {"hbm_bytes_per_s": bandwidth, "weight_bytes": weight_bytes, "seconds": limit_s,
                    "tokens_per_s": generated / limit_s}
    report = {
        "benchmark": "B1",
        "title": "rollout throughput (one GPU)",
        "date": datetime.date.today().isoformat(),
        **provenance(),
        "machine": host,
        "config": {"model": "bench-0.5b (random, Qwen2.5-0.5B shape)", "prompts": a.prompts,
                   "prompt_len": a.prompt_len, "new_tokens": a.new_tokens, "temperature": 1.0, "top_p": 1.0,
                   "ignore_eos": True, "dtype": "bfloat16", "repeats": a.repeats, "hf_repeats": a.hf_repeats,
                   "ours": "continuous batching, max_num_seqs 1024, decode kernel, CUDA graphs"},
        "ours": ours,
        "baseline": baseline,
        "unit": "generated tokens/s",
        "ratio": ours["tokens_per_s"] / baseline["tokens_per_s"] if baseline else None,
        "roofline": roofline,
        "roofline_fraction": ours["tokens_per_s"] / roofline["tokens_per_s"] if roofline else None,
        "max_memory_allocated_gb": {"ours": ours.get("max_memory_allocated_gb"),
                                    "baseline": baseline["peak_memory_allocated_gb"] if baseline else None},
        "variants": variants,
        "profiles": profiles,
    }
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps({k: report[k] for k in ("ratio", "roofline_fraction")}))


if __name__ == "__main__":
    sys.exit(main())
