#!/usr/bin/env python3
"""Memory per rank against the number of data-parallel ranks (issue 5: "peak memory per rank must fall").

Runs a few GRPO steps of a larger random Qwen2 model (about 31 M parameters) with 1, 2 and 4 ranks, each rank in its
own local verl-worker process (trainer.nnodes = ranks, trainer.n_gpus_per_node = 1), so each process's peak resident
set (VmHWM) is one rank's. Reports, per world size and sharding mode (replicated; ZeRO-1, the optimizer state
sharded; ZeRO-3, parameters, gradients and optimizer state sharded), the actor's parameters and optimizer state per
rank (`perf/actor_parameters_gb`, `perf/actor_optimizer_state_gb`) and the ranks' peak RSS (`perf/max_memory_rss_gb`,
group rank 0's). Writes docs/bench/dp-memory-<date>.json.

    python3 tools/bench/dp_memory.py --build-dir build [--steps 2]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build_dir), "bin")
    model = {"hidden": 512, "layers": 8, "heads": 8, "kv-heads": 4, "intermediate": 2048}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([f"{bin_dir}/verl-make-tiny-model", "--out-dir", f"{tmp}/model"] +
                       [x for k, v in model.items() for x in (f"--{k}", str(v))], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([f"{bin_dir}/verl-make-dataset", "--task", "repeat_letter", "--out-dir", f"{tmp}/data"],
                       check=True, stdout=subprocess.DEVNULL)
        modes = {"replicate": ["actor_rollout_ref.actor.shard_optimizer_state=false"],
                 "zero1": ["actor_rollout_ref.actor.shard_optimizer_state=true"],
                 "zero3": ["actor_rollout_ref.actor.shard_optimizer_state=true",
                           "actor_rollout_ref.actor.shard_parameters=true"]}
        for mode, overrides in modes.items():
            for world in [int(w) for w in args.worlds.split(",")]:
                if world == 1 and mode != "replicate":
                    continue  # sharding has no effect on one rank
                name = f"w{world}-{mode}"
                # 8 prompts x 2 samples, one mini-batch; the micro-batch is the rank's whole share.
                cmd = [f"{bin_dir}/verl-controller", "--config", os.path.join(ROOT, "configs/quickstart.yaml"),
                       f"actor_rollout_ref.model.path={tmp}/model", f"data.train_files={tmp}/data/train.parquet",
                       f"data.val_files={tmp}/data/test.parquet", f"trainer.default_local_dir={tmp}/{name}/ckpt",
                       f"trainer.log_dir={tmp}/{name}/out", f"trainer.total_training_steps={args.steps}",
                       "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.val_before_train=false",
                       "trainer.logger=[jsonl]", "data.train_batch_size=8", "actor_rollout_ref.rollout.n=2",
                       "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                       f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={16 // world}",
                       f"trainer.nnodes={world}", "trainer.n_gpus_per_node=1"] + overrides
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                rows = [json.loads(line)["data"] for line in open(f"{tmp}/{name}/out/metrics.jsonl")]
                last = [r for r in rows if "perf/max_memory_rss_gb" in r][-1]
                runs.append({"ranks": world, "mode": mode,
                             "parameters_gb_per_rank": last["perf/actor_parameters_gb"],
                             "optimizer_state_gb_per_rank": last["perf/actor_optimizer_state_gb"],
                             "peak_rss_gb_per_rank": last["perf/max_memory_rss_gb"],
                             "step_seconds": last["timing_s/step"]})
                print(json.dumps(runs[-1]), file=sys.stderr)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "benchmark": "memory per data-parallel rank (CPU: replicated, ZeRO-1, ZeRO-3)",
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "platform": platform.platform()},
        "config": {"model": dict(model, note="random Qwen2 from verl-make-tiny-model, float32"),
                   "batch": "8 prompts x 2 samples, one mini-batch", "steps": args.steps,
                   "process_per_rank": True},
        "runs": runs,
    }
    out = args.out or os.path.join(ROOT, "docs/bench", f"dp-memory-{result['date']}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(runs, indent=2))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
