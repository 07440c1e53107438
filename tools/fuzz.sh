#!/usr/bin/env bash
# libFuzzer over the parsers that read untrusted files (issue 8): the safetensors reader and tensor decoding, the
# tokenizer.json loader, the tokenizer's encoder (with a round-trip property), and the job config parser. Builds with
# clang into build-fuzz/ and runs each target for FUZZ_SECONDS (default 20; CI runs this short form from
# tools/test.sh), starting from seeds made from the project's own files. A crash, a leak or a sanitizer report fails
# the script and leaves the reproducer in build-fuzz/artifacts/.
#
#   tools/fuzz.sh                      # every target, 20 s each
#   FUZZ_SECONDS=1800 tools/fuzz.sh safetensors_fuzz    # a long run of one target
#   FUZZ_SECONDS=1800 FUZZ_PARALLEL=1 tools/fuzz.sh      # long runs of every target at once
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${VERL_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_EACH="${FUZZ_SECONDS:-20}"
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(safetensors_fuzz tokenizer_json_fuzz tokenizer_encode_fuzz config_fuzz)

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVERL_FUZZ=ON \
  -DVERL_BUILD_TESTS=OFF >/dev/null
ninja -C "$BUILD" -j"$(nproc)" "${TARGETS[@]}"

# Seeds: a valid safetensors file, the tiny model's tokenizer.json, the shipped job configs.
seeds="$BUILD/seeds"
mkdir -p "$seeds"/{safetensors_fuzz,tokenizer_json_fuzz,tokenizer_encode_fuzz,config_fuzz} "$BUILD/artifacts"
python3 - "$seeds/safetensors_fuzz/valid.safetensors" <<'PY'
import json, struct, sys
header = json.dumps({"__metadata__": {"format": "pt"},
                     "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                     "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}).encode()
header += b" " * (-len(header) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + bytes(range(22)))
PY
if [ -x "$ROOT/build/bin/verl-make-tiny-model" ]; then
  "$ROOT/build/bin/verl-make-tiny-model" --out-dir "$BUILD/seed-model" --merges 20 >/dev/null
  cp "$BUILD/seed-model/tokenizer.json" "$seeds/tokenizer_json_fuzz/"
fi
printf 'Hello, world! <|im_start|>user\nRepeat the letter a.<|im_end|>\n' > "$seeds/tokenizer_encode_fuzz/chat.txt"
cp "$ROOT"/configs/*.yaml "$seeds/config_fuzz/"

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# One target: its corpus grows in build-fuzz/corpus/<target> across runs; its stats go to build-fuzz/logs/<target>.log.
run_target() {
  local t="$1" corpus="$BUILD/corpus/$1" log="$BUILD/logs/$1.log" rc=0
  mkdir -p "$corpus" "$BUILD/logs"
  echo "[fuzz] $t for ${SECONDS_EACH}s" >&2
  "$BUILD/bin/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 "$corpus" "$seeds/$t" > "$log" 2>&1 || rc=$?
  { grep -E "^stat::number_of_executed_units|^#[0-9]+ +DONE|ERROR|SUMMARY|Test unit written" "$log" || true; } |
    sed "s/^/[$t] /" >&2
  return "$rc"
}

# FUZZ_PARALLEL=1: all targets at once (the long runs; each gets a share of the cores), else one after another.
failed=0
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
  pids=()
  for t in "${TARGETS[@]}"; do run_target "$t" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
else
  for t in "${TARGETS[@]}"; do run_target "$t" || failed=1; done
fi
exit $failed
