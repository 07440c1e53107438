#!/usr/bin/env python3
"""BENCHMARKS.md B0: controller overhead per step on the CPU quickstart.

Runs the quickstart job (tiny Qwen2, GRPO) with the JSONL logger and summarises `perf/controller_overhead`: the
fraction of each step's wall time that is not rank compute (RPCs, serialisation, controller bookkeeping). The rank
compute time comes from the workers' `verl-compute-seconds` trailing metadata. Writes
docs/bench/controller-overhead-<date>.json.

    python3 tools/bench/controller_overhead.py --build-dir build [--steps 100]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build_dir), "bin")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([f"{bin_dir}/verl-make-tiny-model", "--out-dir", f"{tmp}/model"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([f"{bin_dir}/verl-make-dataset", "--task", "repeat_letter", "--out-dir", f"{tmp}/data"],
                       check=True, stdout=subprocess.DEVNULL)
        cmd = [f"{bin_dir}/verl-controller", "--config", os.path.join(ROOT, "configs/quickstart.yaml"),
               f"actor_rollout_ref.model.path={tmp}/model", f"data.train_files={tmp}/data/train.parquet",
               f"data.val_files={tmp}/data/test.parquet", f"trainer.default_local_dir={tmp}/ckpt",
               f"trainer.log_dir={tmp}/out", f"trainer.total_training_steps={args.steps}", "trainer.test_freq=-1",
               "trainer.save_freq=-1", "trainer.logger=[jsonl]"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(line)["data"] for line in open(f"{tmp}/out/metrics.jsonl")]
    rows = [r for r in rows if "perf/controller_overhead" in r]
    overhead = [r["perf/controller_overhead"] for r in rows]
    step_s = [r["timing_s/step"] for r in rows]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "benchmark": "B0 controller overhead (CPU quickstart)",
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
                    "loadavg": os.getloadavg()},
        "config": {"config": "configs/quickstart.yaml", "steps": len(rows)},
        "figures": {"overhead_fraction_mean": statistics.mean(overhead),
                    "overhead_fraction_median": statistics.median(overhead),
                    "overhead_fraction_p90": sorted(overhead)[int(0.9 * (len(overhead) - 1))],
                    "step_seconds_mean": statistics.mean(step_s)},
    }
    out = args.out or os.path.join(ROOT, "docs/bench", f"controller-overhead-{result['date']}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result["figures"], indent=2))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
