#!/usr/bin/env bash
# Runs THERE (the GPU machine): the CUDA build, the [gpu] tests of the rollout engine (decode kernel, CUDA graphs), of
# the trainer's kernels and of the rank, then the benchmarks of BENCHMARKS.md on one GPU: B1 (rollout against HF
# generate; with the decode attention kernel alone), B2 (actor update against PyTorch eager), B3 (a GRPO step against
# TRL's GRPOTrainer; TRL's wheels carried in .device-wheels/, see tools/device/fetch_wheels.sh), and with LP=1 the
# trainer's no-grad log-prob pass alone at B3's shape, profiled (verl-bench-update --log-probs 1). Results in $OUT:
# summary.json, build.log, tests.log, decode_attention.jsonl, gemm.jsonl, b1.json, b2.json, b3.json, lp.json, *.log.
# PAD=1: the log-prob pass (B3's shape) and the update (B2's) over rows of varied prompt and response lengths (left and
# right padding), each three ways: causal passes over rolled rows (the default), the explicit mask
# (VERL_CAUSAL_PASSES=0) and packed (--remove-padding 1): pad.jsonl.
# UP=1: a B3 mini-batch's actor update alone (verl-bench-update: 512 rows of 256 + 512 tokens, n 8, shared prompts,
# checkpointing, a 24,576-token budget) once per entry of UP_VARIANTS (more flags, ';' between entries; default: every
# layer recomputed, 12, none: --recompute-layers; an entry's VERL_*=... words set the environment), the entries
# alternating over two rounds: up.jsonl.
#
#   VERL_COMMIT=<hash> tools/device/perf_gpu.sh      # TESTS=1 B1=1 B2=1 B3=1
# Pass the commit's hash as a literal (taken on your machine): the device copy's .git can be stale (without it the
# result files name that stale HEAD as "<HEAD>-dirty (tree <hash>)", the hash of the tree that ran).
#   B1_ARGS="--variants" B2_ARGS="--micro 8" B3_ARGS="--steps 2"
#   B1_ARGS="--skip-hf --profile --repeats 3 --flag-variants '--fold-norms 0'"   (single quotes inside: B1_ARGS is eval'd)
#   LP=1 LP_ARGS="--remove-padding 1"   (LP_ARGS: more verl-bench-update flags for the log-prob pass)
#   MICRO=0: B1 without the decode attention micro-benchmark; GEMM=0: without the GEMM one
#   GEMM_ARGS="--only down --m 256,512": verl-bench-gemm's flags
# B2_ARGS defaults to the configuration docs/bench reports (micro-batches of 32, a 24,576-token budget for ours).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/build-cuda/out}"
BUILD_DIR="${VERL_BUILD_DIR:-$ROOT/build-cuda}"
TESTS="${TESTS:-1}"
B1="${B1:-1}"
B2="${B2:-1}"
B3="${B3:-1}"
MICRO="${MICRO:-1}"
LP="${LP:-0}"
PAD="${PAD:-0}"
UP="${UP:-0}"
GEMM="${GEMM:-1}"
mkdir -p "$OUT"
start=$(date +%s)
secs() { echo $(( $(date +%s) - start )); }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv; } > "$OUT/build.log" 2>&1
. "$ROOT/tools/device/build.sh" --env-only
set +e
"$ROOT/tools/device/build.sh" gpu_decode_test gpu_rank_test gpu_train_kernels_test verl-bench-decode-attention verl-bench-gemm verl-bench-rollout verl-bench-update verl-make-tiny-model \
  verl-controller verl-worker verl-make-dataset >> "$OUT/build.log" 2>&1
build_rc=$?
build_s=$(secs)

tests_rc=-1; b1_rc=-1; b2_rc=-1; b3_rc=-1; lp_rc=-1; pad_rc=-1; up_rc=-1
# bench-0.5b for the verl-bench-update runs (LP, PAD), made once: bench_model LOG sets $model (fails if it cannot).
model=""
bench_model() {
  [ -n "$model" ] && return 0
  local dir; dir="$(mktemp -d)/bench-0.5b"
  (cd "$ROOT/tools/bench" && python3 -c "import sys, gpu_bench_common as g; g.make_bench_model(sys.argv[1], sys.argv[2])" \
    "$BUILD_DIR/bin" "$dir") >> "$1" 2>&1 && model="$dir"
}
if [ $build_rc = 0 ]; then
  if [ "$TESTS" = 1 ]; then
    timeout 240 "$BUILD_DIR/bin/gpu_decode_test" --durations yes > "$OUT/tests.log" 2>&1
    tests_rc=$?
    timeout 240 "$BUILD_DIR/bin/gpu_rank_test" --durations yes >> "$OUT/tests.log" 2>&1
    tests_rc=$(( tests_rc + $? ))
    timeout 240 "$BUILD_DIR/bin/gpu_train_kernels_test" --durations yes >> "$OUT/tests.log" 2>&1
    tests_rc=$(( tests_rc + $? ))
  fi
  if [ "$B1" = 1 ] && [ "$MICRO" = 1 ]; then
    # The decode attention kernel alone at B1's mean decode shape (512 slots of 512 positions), spread lengths and
    # head dim 128 (Qwen2.5-7B's heads), beside a plain read of the same bytes in the same grid (its floor) and by a
    # persistent grid (whether one without waves reads faster), twice over (the spread is the noise).
    for rep in 1 2; do
      for dab in "" "--min-len 256 --max-len 768" "--head-dim 128 --q-heads 28 --kv-heads 4 --batch 256"; do
        for impl in "--impl read" "--impl read-persist" "--impl mma"; do
          timeout 60 "$BUILD_DIR/bin/verl-bench-decode-attention" $dab $impl --iters 100
        done
      done
    done > "$OUT/decode_attention.jsonl" 2>&1
  fi
  if [ "$B1" = 1 ] && [ "$GEMM" = 1 ]; then
    # The step's GEMMs at decode batch sizes, every cuBLASLt algorithm against the heuristic's first.
    timeout 120 "$BUILD_DIR/bin/verl-bench-gemm" ${GEMM_ARGS:-} > "$OUT/gemm.jsonl" 2>&1
  fi
  if [ "$B1" = 1 ]; then
    eval timeout 400 python3 "$ROOT/tools/bench/b1_rollout.py" --build-dir "$BUILD_DIR" --out "$OUT/b1.json" \
      "${B1_ARGS:-}" > "$OUT/b1.log" 2>&1
    b1_rc=$?
  fi
  if [ "$B2" = 1 ]; then
    b2_args="${B2_ARGS:---micro 32 --ours-flags '--max-token-len 24576'}"
    eval timeout 400 python3 "$ROOT/tools/bench/b2_update.py" --build-dir "$BUILD_DIR" --out "$OUT/b2.json" \
      "$b2_args" > "$OUT/b2.log" 2>&1
    b2_rc=$?
  fi
  if [ "$B3" = 1 ]; then
    eval timeout 500 python3 "$ROOT/tools/bench/b3_grpo.py" --build-dir "$BUILD_DIR" --out "$OUT/b3.json" \
      "${B3_ARGS:-}" > "$OUT/b3.log" 2>&1
    b3_rc=$?
  fi
  if [ "$LP" = 1 ]; then
    # B3's old-log-prob pass alone: 1,024 x (256 + 512) tokens in passes of 24,576 tokens, bf16, with its profile.
    bench_model "$OUT/lp.log" &&
      eval timeout 300 "$BUILD_DIR/bin/verl-bench-update" --model "$model" --sequences 1024 --prompt-len 256 \
        --response-len 512 --max-token-len 24576 --repeats 2 --log-probs 1 --profile 1 "${LP_ARGS:-}" \
        > "$OUT/lp.json" 2>> "$OUT/lp.log"
    lp_rc=$?
  fi
  if [ "$UP" = 1 ]; then
    up_rc=0
    bench_model "$OUT/up.log" || up_rc=1
    IFS=';' read -r -a up_variants <<< "${UP_VARIANTS:---recompute-layers -1;--recompute-layers 12;--recompute-layers 0}"
    [ $up_rc = 0 ] && for round in 1 2; do
      for v in "${up_variants[@]}"; do
        env_set=""; flags=""
        for word in $v; do case "$word" in VERL_*=*) env_set="$env_set $word" ;; *) flags="$flags $word" ;; esac; done
        env $env_set timeout 200 "$BUILD_DIR/bin/verl-bench-update" --model "$model" --sequences 512 --prompt-len 256 \
          --response-len 512 --max-token-len 24576 --n 8 --prefix-grouper 1 --checkpointing 1 --repeats 2 $flags \
          >> "$OUT/up.jsonl" 2>> "$OUT/up.log" || up_rc=1
        echo "{\"round\": $round, \"variant\": \"$v\"}" >> "$OUT/up.jsonl"
      done
    done
  fi
  if [ "$PAD" = 1 ]; then
    # Prompts of 64-256 tokens and responses of 64-512, uniform per row (seeded), in the passes' token budgets.
    pad_rc=0
    bench_model "$OUT/pad.log" || pad_rc=1
    [ $pad_rc = 0 ] && for pass in "--log-probs 1 --sequences 1024" "--log-probs 0 --sequences 512"; do
      for way in "" "VERL_CAUSAL_PASSES=0" "--remove-padding 1"; do
        env_set=""; extra=""
        case "$way" in VERL_*) env_set="$way" ;; *) extra="$way" ;; esac
        env $env_set timeout 200 "$BUILD_DIR/bin/verl-bench-update" --model "$model" $pass --prompt-len 256 \
          --response-len 512 --min-prompt-len 64 --min-response-len 64 --max-token-len 24576 --micro 32 --repeats 3 \
          $extra >> "$OUT/pad.jsonl" 2>> "$OUT/pad.log" || pad_rc=1
        echo "{\"way\": \"${way:-causal}\", \"pass\": \"$pass\"}" >> "$OUT/pad.jsonl"
      done
    done
  fi
fi
cat > "$OUT/summary.json" <<JSON
{"build_rc": $build_rc, "build_s": $build_s, "tests_rc": $tests_rc, "b1_rc": $b1_rc, "b2_rc": $b2_rc,
 "b3_rc": $b3_rc, "lp_rc": $lp_rc, "pad_rc": $pad_rc, "up_rc": $up_rc, "total_s": $(secs)}
JSON
cat "$OUT/summary.json"
grep -E "test cases|assertions|FAILED|skipped" "$OUT/tests.log" 2>/dev/null | head -20
tail -3 "$OUT/b1.log" "$OUT/b2.log" "$OUT/b3.log" "$OUT/lp.log" "$OUT/pad.log" "$OUT/up.log" 2>/dev/null
