#!/usr/bin/env python3
"""BENCHMARKS.md B3, one end-to-end GRPO step on one GPU: verl-controller (our rollout engine and trainer) against TRL's
GRPOTrainer (HF generate, no vLLM) with the same settings on the same model and prompt files, in the same run.

Runs on the GPU machine (tools/device/perf_gpu.sh). bench-0.5b (verl-make-tiny-model: the Qwen2.5-0.5B shape, random
weights, its small byte-level tokenizer), 128 prompts of 256 tokens (after the chat template) x n=8 samples, 512 new
tokens (ignore EOS: ours with actor_rollout_ref.rollout.ignore_eos, TRL with min_new_tokens 512), one PPO epoch,
mini-batches of 64 prompts (two optimizer steps per step), KL loss (low_var_kl, 0.001) against the frozen reference
model, grad clip 1.0, lr 1e-6, bf16 with float32 master weights (ours; TRL: bf16 autocast over float32 weights, its
default with bf16=True).

Figures: seconds per step (wall clock of a whole step after the first, which includes warm-ups) and perf/throughput,
verl's definition: (prompt + response tokens of the step) / step seconds / GPUs. TRL's step is one generation batch
(1024 completions) and the two optimizer steps it feeds, timed by a callback at optimizer-step ends.

Ours runs with actor_rollout_ref.actor.use_prefix_grouper (the 8 samples of a prompt share one run of its 256 tokens in
the trainer's passes; the same numbers but for rounding); --prefix-grouper 0 turns it off, --ab-prefix-grouper runs
ours both ways in the same run; --ab KEY=VALUE (repeatable) runs ours a second time with those overrides instead
(e.g. --ab actor_rollout_ref.rollout.enable_prefix_caching=false), its figures under ours_other.

Activation checkpointing is on in both, their defaults (verl's enable_gradient_checkpointing, TRL's GRPOConfig
gradient_checkpointing); --gradient-checkpointing 0 turns it off in both.

usage: b3_grpo.py --build-dir build-cuda --out FILE.json [--steps 3] [--skip-trl] [--wheels .device-wheels]
                  [--prefix-grouper 0|1] [--ab-prefix-grouper | --ab KEY=VALUE ...] [--gradient-checkpointing 0|1]
"""
import argparse
import datetime
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from gpu_bench_common import machine, make_bench_model, provenance

PROMPTS, N, PROMPT_LEN, RESPONSE_LEN, MINI = 128, 8, 256, 512, 64
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_dataset(path, rows, count_tokens):
    """verl's parquet layout (the repeat_letter task's reward); each prompt is its index and then letters, cut so that
    the chat-templated prompt is at most PROMPT_LEN tokens by `count_tokens(body)`. Every prompt differs (the letters
    alone repeat every 26 rows), so the only rows with one prompt are its n samples, as in a real dataset: that is what
    use_prefix_grouper shares. Returns the longest prompt's tokens."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    letters = "abcdefghijklmnopqrstuvwxyz"
    data = []
    longest = 0
    for i in range(rows):
        body = f"{i:05d} " + "".join(letters[(i * 7 + j * 3) % 26] for j in range(PROMPT_LEN))
        while True:
            n = count_tokens(body)
            if n <= PROMPT_LEN:
                break
            body = body[: len(body) - (n - PROMPT_LEN)]
        longest = max(longest, n)
        data.append({"prompt": [{"content": body, "role": "user"}], "data_source": "verl_cpp/repeat_letter",
                     "reward_model": {"ground_truth": "abcd"[i % 4], "style": "rule"},
                     "extra_info": {"index": i, "split": "train"}})
    assert len({d["prompt"][0]["content"] for d in data}) == rows, "B3's prompts must all differ"
    pq.write_table(pa.Table.from_pylist(data), path)
    return longest


def hf_token_counter(model_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)

    def count(body):
        text = tok.apply_chat_template([{"role": "user", "content": body}], add_generation_prompt=True,
                                       tokenize=False)
        return len(tok(text, add_special_tokens=False)["input_ids"])
    return count


def run_ours(bin_dir, model, data, work, steps, prefix_grouper, checkpointing, name="ours", overrides=()):
    logs = os.path.join(work, f"{name}-logs")
    cmd = [os.path.join(bin_dir, "verl-controller"), "--config", os.path.join(ROOT, "configs/quickstart.yaml"),
           f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", f"data.val_files={data}",
           f"data.train_batch_size={PROMPTS}", f"data.max_prompt_length={PROMPT_LEN}",
           f"data.max_response_length={RESPONSE_LEN}", f"actor_rollout_ref.rollout.n={N}",
           f"actor_rollout_ref.actor.ppo_mini_batch_size={MINI}", "actor_rollout_ref.actor.ppo_epochs=1",
           "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.optim.weight_decay=0.0",
           "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.001",
           "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.grad_clip=1.0",
           "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576",
           "actor_rollout_ref.model.dtype=bfloat16", "actor_rollout_ref.rollout.temperature=1.0",
           "actor_rollout_ref.rollout.ignore_eos=true",
           "actor_rollout_ref.rollout.top_p=1.0", "algorithm.adv_estimator=grpo",
           f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
           "trainer.val_before_train=false", "trainer.logger=[console,jsonl]", "trainer.device=cuda",
           "trainer.n_gpus_per_node=1", f"trainer.default_local_dir={work}/{name}-ckpt", f"trainer.log_dir={logs}",
           "cluster.num_threads_per_rank=8", "cluster.worker_start_timeout_s=120",
           f"actor_rollout_ref.actor.use_prefix_grouper={'true' if prefix_grouper else 'false'}",
           f"actor_rollout_ref.model.enable_gradient_checkpointing={'true' if checkpointing else 'false'}", *overrides]
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"verl-controller failed ({r.returncode}): {r.stderr[-3000:]}")
    steps_data = [json.loads(line)["data"] for line in open(os.path.join(logs, "metrics.jsonl"))]
    keys = ["timing_s/step", "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/ref",
            "timing_s/adv", "timing_s/update_actor", "perf/controller_overhead",
            "perf/throughput", "perf/max_memory_allocated_gb", "perf/rollout_max_memory_allocated_gb",
            "perf/old_log_prob_max_memory_allocated_gb", "perf/ref_max_memory_allocated_gb",
            "perf/update_max_memory_allocated_gb", "response_length/mean", "prompt_length/mean",
            "training/rollout_probs_diff_max", "training/rollout_probs_diff_mean",
            "training/rollout_log_probs_diff_max", "training/rollout_log_probs_diff_mean", "actor/grad_norm",
            "actor/kl_loss", "perf/rollout_kv_cache_slots", "perf/old_log_prob_deferred_rows",
            "perf/actor_packed_tokens", "perf/actor_micro_batches", "perf/max_memory_reserved_gb",
            "perf/actor_recomputed_layers"]
    per_step = [{k: d.get(k) for k in keys} for d in steps_data]
    timed = per_step[1:] or per_step
    sec = sum(s["timing_s/step"] for s in timed) / len(timed)
    return {"engine": "verl-cpp (verl-controller, embedded worker)", "use_prefix_grouper": prefix_grouper,
            "overrides": list(overrides), "wall_s": wall, "steps": per_step,
            "seconds_per_step": sec,
            "throughput": sum(s["perf/throughput"] for s in timed) / len(timed),
            "max_memory_allocated_gb": max((s["perf/max_memory_allocated_gb"] or 0) for s in per_step)}


def install_trl(wheels, site):
    """TRL and what the machine lacks of its dependencies, from carried wheels, into `site` (no network)."""
    missing = []
    for whl in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
        name = os.path.basename(whl).split("-")[0].lower()
        module = {"python_dateutil": "dateutil", "pyyaml": "yaml"}.get(name, name)
        if importlib.util.find_spec(module) is None:
            missing.append(whl)
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target", site]
                       + missing, check=True)
    sys.path.insert(0, site)
    return [os.path.basename(m) for m in missing]


def run_trl(model, data, work, steps, checkpointing):
    import torch
    import transformers
    import trl
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    dataset = load_dataset("parquet", data_files=data, split="train").select_columns(["prompt"])

    def reward(completions, **kwargs):  # cheap, varied: the share of 'a' in the completion
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [t.count("a") / max(1, len(t)) for t in texts]

    micro = 32
    config = GRPOConfig(
        output_dir=os.path.join(work, "trl"), per_device_train_batch_size=micro,
        gradient_accumulation_steps=MINI * N // micro, generation_batch_size=PROMPTS * N, num_generations=N,
        max_completion_length=RESPONSE_LEN, temperature=1.0, top_p=1.0, top_k=0, beta=0.001, num_iterations=1,
        epsilon=0.2, learning_rate=1e-6, weight_decay=0.0, max_grad_norm=1.0, bf16=True, max_steps=2 * steps,
        logging_steps=1, save_strategy="no", report_to=[], use_vllm=False, shuffle_dataset=False,
        generation_kwargs={"min_new_tokens": RESPONSE_LEN}, log_completions=False, seed=0,
        gradient_checkpointing=checkpointing)

    marks = []

    class Timer(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            torch.cuda.synchronize()
            marks.append(time.perf_counter())

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset, callbacks=[Timer()])
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    # A GRPO step = one generation batch and its two optimizer steps: marks[1], marks[3], ... end steps.
    ends = marks[1::2]
    step_seconds = [b - a for a, b in zip(ends, ends[1:])]
    sec = sum(step_seconds) / len(step_seconds) if step_seconds else float("nan")
    tokens = PROMPTS * N * (PROMPT_LEN + RESPONSE_LEN)
    return {"engine": "trl-grpo-trainer (HF generate)", "trl": trl.__version__, "transformers": transformers.__version__,
            "torch": torch.__version__, "wall_s": wall, "step_seconds": step_seconds, "seconds_per_step": sec,
            "throughput": tokens / sec, "max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
            "log": [{k: v for k, v in h.items() if k in ("loss", "kl", "grad_norm", "completions/mean_length",
                                                          "reward", "step")} for h in trainer.state.log_history]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build-cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--skip-trl", action="store_true")
    ap.add_argument("--wheels", default=os.path.join(ROOT, ".device-wheels"))
    ap.add_argument("--prefix-grouper", type=int, default=1,
                    help="ours with actor_rollout_ref.actor.use_prefix_grouper (a prompt's 8 samples share its run)")
    ap.add_argument("--ab-prefix-grouper", action="store_true",
                    help="also run ours with the other use_prefix_grouper setting (JSON: ours_other)")
    ap.add_argument("--ab", action="append", default=[], metavar="KEY=VALUE",
                    help="also run ours with these overrides (JSON: ours_other)")
    ap.add_argument("--gradient-checkpointing", type=int, default=1,
                    help="activation checkpointing in ours and in TRL (both default to it)")
    a = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(a.build_dir), "bin")
    work = tempfile.mkdtemp(prefix="b3_")
    model = os.path.join(work, "bench-0.5b")
    make_bench_model(bin_dir, model)
    data = os.path.join(work, "train.parquet")
    prompt_tokens = make_dataset(data, PROMPTS * max(a.steps, 2), hf_token_counter(model))
    ckpt = bool(a.gradient_checkpointing)
    ours = run_ours(bin_dir, model, data, work, a.steps, bool(a.prefix_grouper), ckpt)
    print(json.dumps({k: v for k, v in ours.items() if k != "steps"}), file=sys.stderr)
    other = None
    if a.ab_prefix_grouper or a.ab:
        grouper = bool(a.prefix_grouper) != a.ab_prefix_grouper
        other = run_ours(bin_dir, model, data, work, a.steps, grouper, ckpt, name="ours-other", overrides=a.ab)
        print(json.dumps({k: v for k, v in other.items() if k != "steps"}), file=sys.stderr)
    baseline = None
    installed = []
    if not a.skip_trl:
        installed = install_trl(a.wheels, os.path.join(work, "site"))
        baseline = run_trl(model, data, work, a.steps, ckpt)
        baseline["installed_wheels"] = installed
        print(json.dumps({k: v for k, v in baseline.items() if k != "log"}), file=sys.stderr)
    report = {
        "benchmark": "B3",
        "title": "end-to-end GRPO step (one GPU)",
        "date": datetime.date.today().isoformat(),
        **provenance(),
        "machine": machine(),
        "config": {"model": "bench-0.5b (random, Qwen2.5-0.5B shape)", "prompts": PROMPTS, "n": N,
                   "prompt_tokens": prompt_tokens, "response_len": RESPONSE_LEN, "ppo_epochs": 1,
                   "mini_batch_prompts": MINI, "kl_loss": "low_var_kl 0.001 against the reference model",
                   "grad_clip": 1.0, "lr": 1e-6, "steps": a.steps, "timed": "steps after the first",
                   "gradient_checkpointing": ckpt},
        "ours": ours,
        "ours_other": other,
        "baseline": baseline,
        "unit": "seconds per step (ratio: baseline seconds / ours seconds, = throughput ratio)",
        "ratio": baseline["seconds_per_step"] / ours["seconds_per_step"] if baseline else None,
        "throughput_unit": "tokens/s/GPU (perf/throughput)",
        "max_memory_allocated_gb": {"ours": ours["max_memory_allocated_gb"],
                                    "baseline": baseline["max_memory_allocated_gb"] if baseline else None},
        # The log-probs' gap (training/rollout_probs_diff_max was that gap until 2026-12-05; now verl's, on
        # probabilities).
        "rollout_vs_trainer_log_prob_diff_max": [s.get("training/rollout_log_probs_diff_max") for s in ours["steps"]],
    }
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps({k: report[k] for k in ("ratio", "max_memory_allocated_gb")}))


if __name__ == "__main__":
    sys.exit(main())
