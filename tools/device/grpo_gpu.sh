#!/usr/bin/env bash
# Runs THERE (the GPU machine): the CUDA build of the whole project, the [gpu] rank test (a GRPO step on cuda:0
# against the CPU), then GRPO with verl-controller on bench-0.5b (BENCHMARKS.md: the Qwen2.5-0.5B architecture with
# random weights) on one GPU and, when two are visible, on two (data parallel); also with the optimizer state offloaded
# to host memory (OFFLOAD=1) and with parameters sharded over the two GPUs (ZERO3=1, ZeRO-3). Results in $OUT:
#   grpo_gpu.json   what ran, per-run step times and metrics
#   build.log, tests.log, run-<name>.log
#
#   tools/device/grpo_gpu.sh            # STEPS=3 PROMPTS=64 N=8 RESPONSE=128 DTYPE=float32 HOST_COMPARE=1 OFFLOAD=1 ZERO3=1
#   SAVE_FREQ=10 RESUME_STEPS=20 ...    # checkpoints every 10 steps, then gpu1 resumed from its last one for 20 more
#   TESTS=0 ...                         # without the rank test (gpu_rank_test_rc -1)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/build-cuda/out}"
BUILD_DIR="${VERL_BUILD_DIR:-$ROOT/build-cuda}"
STEPS="${STEPS:-3}"
PROMPTS="${PROMPTS:-64}"
N="${N:-8}"
RESPONSE="${RESPONSE:-128}"
DTYPE="${DTYPE:-float32}"            # or bfloat16 (float32 master weights)
HOST_COMPARE="${HOST_COMPARE:-1}"    # also run 2 GPUs over the host backend
OFFLOAD="${OFFLOAD:-1}"              # also run 1 GPU with fsdp_config.optimizer_offload
ZERO3="${ZERO3:-1}"                  # also run 2 GPUs with shard_parameters (ZeRO-3)
SPLIT="${SPLIT:-1}"                  # also run 2 GPUs with split placement (one trains, one generates)
CRITIC="${CRITIC:-0}"                # also PPO (GAE) on 1 GPU and with the critic on a GPU of its own
BASE="${BASE:-1}"                    # the GRPO runs on 1 and 2 GPUs
SAVE_FREQ="${SAVE_FREQ:--1}"         # trainer.save_freq of every run (keeping the last two checkpoints)
RESUME_STEPS="${RESUME_STEPS:-0}"    # > 0: gpu1 resumed from its last checkpoint for this many steps more (gpu1-resume)
TESTS="${TESTS:-1}"                  # 0: skip the [gpu] rank test (perf_gpu.sh runs it too)
mkdir -p "$OUT"
start=$(date +%s)
secs() { echo $(( $(date +%s) - start )); }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total --format=csv; } > "$OUT/build.log" 2>&1
. "$ROOT/tools/device/build.sh" --env-only
set +e  # build.sh sets -e when sourced; this script records failures instead of stopping at the first
"$ROOT/tools/device/build.sh" verl-controller verl-worker verl-make-tiny-model verl-make-dataset gpu_rank_test \
  >> "$OUT/build.log" 2>&1
build_rc=$?
build_s=$(secs)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)

tests_rc=-1
runs=()
if [ $build_rc = 0 ]; then
  if [ "$TESTS" = 1 ]; then
    timeout 300 "$BUILD_DIR/bin/gpu_rank_test" --durations yes > "$OUT/tests.log" 2>&1
    tests_rc=$?
  fi
  work=/tmp/verl-grpo-gpu
  rm -rf "$work"; mkdir -p "$work"
  "$BUILD_DIR/bin/verl-make-tiny-model" --out-dir "$work/bench-0.5b" --hidden 896 --layers 24 --heads 14 \
    --kv-heads 2 --intermediate 4864 --vocab-size 151936 --rope-theta 1000000 >> "$OUT/tests.log" 2>&1
  "$BUILD_DIR/bin/verl-make-dataset" --task repeat_letter --out-dir "$work/data" >> "$OUT/tests.log" 2>&1
  run() {  # name ranks [overrides...]; CKPT=<another run's name> run ...: that run's checkpoint directory
    local name=$1 ranks=$2
    local ckpt="${CKPT:-$name}"
    shift 2
    local mini=16
    timeout 420 "$BUILD_DIR/bin/verl-controller" --config "$ROOT/configs/quickstart.yaml" \
      actor_rollout_ref.model.path="$work/bench-0.5b" data.train_files="$work/data/train.parquet" \
      data.val_files="$work/data/test.parquet" trainer.default_local_dir="$work/$ckpt/ckpt" \
      trainer.log_dir="$work/$name/logs" trainer.total_training_steps="$STEPS" trainer.save_freq="$SAVE_FREQ" \
      trainer.test_freq=-1 trainer.val_before_train=false trainer.logger=[console,jsonl] trainer.device=cuda \
      trainer.n_gpus_per_node="$ranks" data.train_batch_size="$PROMPTS" actor_rollout_ref.rollout.n="$N" \
      data.max_response_length="$RESPONSE" actor_rollout_ref.actor.ppo_mini_batch_size=$mini \
      actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
      actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
      actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64 actor_rollout_ref.actor.optim.lr=1e-6 \
      cluster.num_threads_per_rank=4 cluster.worker_start_timeout_s=120 actor_rollout_ref.model.dtype="$DTYPE" \
      trainer.max_actor_ckpt_to_keep=2 trainer.max_critic_ckpt_to_keep=2 \
      "$@" > "$OUT/run-$name.log" 2>&1
    local rc=$?
    cp "$work/$name/logs/metrics.jsonl" "$work/$name.jsonl" 2>/dev/null
    tail -c 3000 "$work/$name/logs/workers/worker-0.log" >> "$OUT/run-$name.log" 2>/dev/null
    runs+=("$name:$ranks:$rc")
  }
  if [ "$BASE" = 1 ]; then run gpu1 1; fi
  if [ "$BASE" = 1 ] && [ "$RESUME_STEPS" -gt 0 ]; then  # resume_mode auto: from gpu1's last checkpoint
    CKPT=gpu1 run gpu1-resume 1 trainer.total_training_steps=$(( STEPS + RESUME_STEPS ))
  fi
  if [ "$OFFLOAD" = 1 ]; then run gpu1-offload 1 actor_rollout_ref.actor.fsdp_config.optimizer_offload=true; fi
  ppo=(algorithm.adv_estimator=gae critic.ppo_micro_batch_size_per_gpu=32 critic.forward_micro_batch_size_per_gpu=64)
  if [ "$CRITIC" = 1 ]; then run gpu1-ppo 1 "${ppo[@]}"; fi
  if [ "$gpus" -ge 2 ]; then
    if [ "$BASE" = 1 ]; then run gpu2 2; fi      # NCCL (cluster.comm_backend=auto)
    if [ "$CRITIC" = 1 ]; then run gpu2-ppo-critic 2 "${ppo[@]}" resource_pool.critic_ranks=1; fi
    if [ "$ZERO3" = 1 ]; then run gpu2-zero3 2 actor_rollout_ref.actor.shard_parameters=true; fi
    if [ "$SPLIT" = 1 ]; then run gpu2-split 2 resource_pool.rollout_ranks=1; fi
    if [ "$HOST_COMPARE" = 1 ]; then run gpu2-host 2 cluster.comm_backend=host; fi  # the host backend, to compare
  fi
fi

python3 - "$OUT" "/tmp/verl-grpo-gpu" <<PY
import json, sys, os
out, work = sys.argv[1], sys.argv[2]
s = {"build_rc": $build_rc, "build_s": $build_s, "gpus": $gpus, "gpu_rank_test_rc": $tests_rc,
     "settings": {"steps": $STEPS, "prompts": $PROMPTS, "n": $N, "max_response_length": $RESPONSE,
                  "model": "bench-0.5b (random)", "dtype": "$DTYPE",
                  "save_freq": $SAVE_FREQ, "resume_steps": $RESUME_STEPS}, "runs": [], "total_s": $(secs)}
keys = ["timing_s/step", "timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor",
        "perf/throughput", "perf/total_num_tokens", "response_length/mean", "actor/grad_norm", "actor/pg_loss",
        "perf/max_memory_rss_gb", "perf/actor_optimizer_state_gb", "perf/actor_parameters_gb",
        "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "critic/score/mean",
        "timing_s/weight_sync", "timing_s/transfer_batch", "perf/weight_sync_gb", "perf/transfer_batch_mb",
        "training/rollout_probs_diff_max", "critic/vf_loss", "critic/grad_norm", "timing_s/values",
        "timing_s/update_critic", "timing_s/save_checkpoint"]
for spec in "${runs[@]}".split():
    name, ranks, rc = spec.split(":")
    r = {"name": name, "ranks": int(ranks), "rc": int(rc), "steps": []}
    path = os.path.join(work, name + ".jsonl")
    if os.path.exists(path):
        for line in open(path):
            d = json.loads(line)
            r["steps"].append({"step": d["step"], **{k: d["data"].get(k) for k in keys}})
    s["runs"].append(r)
json.dump(s, open(os.path.join(out, "grpo_gpu.json"), "w"), indent=1)
print(json.dumps(s, indent=1)[:6000])
PY
