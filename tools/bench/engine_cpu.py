#!/usr/bin/env python3
"""The rollout schedule and activation checkpointing, measured on the CPU (issue 6's engine work before its GPU runs).

1. Rollout: a random Qwen2 (hidden 256, 4 layers, vocab 4096) generates up to --new-tokens for --prompts random
   prompts, where every 64th token id is an EOS, so response lengths spread out like real rollouts (a long tail).
   With the same number of sequences decoding at once (--slots), static batching runs waves that each wait for their
   longest sequence, continuous batching refills a finished sequence's slot at once. Both generate the same tokens.
2. Update: verl-bench-update on the same model without --checkpointing, with it, and with it and
   --keep-projections 0 (recompute_keep_projections=false): seconds per update and the peak resident set of the
   process.

Writes docs/bench/engine-cpu-<date>.json.

    python3 tools/bench/engine_cpu.py --build-dir build
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--slots", default="32,128")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build_dir), "bin")
    model = {"hidden": 256, "layers": 4, "heads": 4, "kv-heads": 2, "intermediate": 1024, "vocab-size": 4096}
    rollout, update = [], []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([f"{bin_dir}/verl-make-tiny-model", "--out-dir", f"{tmp}/model"] +
                       [x for k, v in model.items() for x in (f"--{k}", str(v))], check=True,
                       stdout=subprocess.DEVNULL)
        for slots in [int(s) for s in args.slots.split(",")]:
            for schedule in ("static", "continuous"):
                r = run_json([f"{bin_dir}/verl-bench-rollout", "--model", f"{tmp}/model", "--device", "cpu",
                              "--dtype", "float32", "--prompts", str(args.prompts), "--prompt-len", "32",
                              "--new-tokens", str(args.new_tokens), "--eos-every", "64", "--warmup", "0",
                              "--repeats", str(args.repeats), "--schedule", schedule, "--max-num-seqs", str(slots)])
                rollout.append(r)
                print(json.dumps({k: r[k] for k in ("schedule", "max_num_seqs", "best_seconds", "generated_tokens",
                                                    "tokens_per_s")}), file=sys.stderr)
        # Without checkpointing; with it (keeping each layer's projections, the default); with it, recomputing them.
        for checkpointing, keep in (("0", "1"), ("1", "1"), ("1", "0")):
            u = run_json([f"{bin_dir}/verl-bench-update", "--model", f"{tmp}/model", "--device", "cpu",
                          "--dtype", "float32", "--sequences", "16", "--prompt-len", "128", "--response-len", "384",
                          "--micro", "16", "--warmup", "1", "--repeats", str(args.repeats),
                          "--checkpointing", checkpointing, "--keep-projections", keep])
            update.append(u)
            print(json.dumps({k: u[k] for k in ("gradient_checkpointing", "keep_projections", "best_seconds",
                                                "peak_rss_gb", "grad_norm")}), file=sys.stderr)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip() != ""
    result = {
        "benchmark": "rollout schedule (static vs continuous batching) and activation checkpointing, CPU",
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "dirty": dirty,
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
                    "loadavg": os.getloadavg()},
        "config": {"model": dict(model, note="random Qwen2 from verl-make-tiny-model, float32"),
                   "rollout": {"prompts": args.prompts, "prompt_len": 32, "new_tokens": args.new_tokens,
                               "eos": "every 64th token id"},
                   "update": {"sequences": 16, "prompt_len": 128, "response_len": 384, "micro_batch": 16}},
        "rollout": rollout,
        "update": update,
    }
    out = args.out or os.path.join(ROOT, "docs", "bench", f"engine-cpu-{result['date']}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(out)


if __name__ == "__main__":
    main()
