#!/usr/bin/env bash
# Runs THERE (the GPU machine): builds the NCCL tests, runs every [gpu] test case, then (time permitting) the full
# build and the ordinary CTest suites. Results go to $OUT (at most 8 files come back from the device tool):
#   summary.json       what ran, pass/fail counts, seconds
#   gpu_tests.xml      JUnit of nccl_comm_test's [gpu] cases; gpu_tests.txt its console output (durations)
#   build.log          configure + build output; ctest.log the ordinary suites
#
#   tools/device/run_gpu_tests.sh              # GPU tests, then full build + ctest
#   VERL_GPU_ONLY=1 tools/device/run_gpu_tests.sh
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/build-cuda/out}"
BUILD_DIR="${VERL_BUILD_DIR:-$ROOT/build-cuda}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
start=$(date +%s)
secs() { echo $(( $(date +%s) - start )); }

{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'; } \
  > "$OUT/build.log" 2>&1
. "$ROOT/tools/device/build.sh" --env-only
set +e

# 1. The NCCL test binary (and the host-backend one, same suite).
"$ROOT/tools/device/build.sh" nccl_comm_test comm_test >> "$OUT/build.log" 2>&1
build_rc=$?
build_s=$(secs)

# 2. The [gpu] cases; the init-timeout case separately, so a hang there cannot hide the rest.
gpu_rc=-1; init_rc=-1
if [ $build_rc = 0 ]; then
  bin="$BUILD_DIR/bin/nccl_comm_test"
  timeout 300 "$bin" "[gpu]~[init]" --durations yes -r junit -o "$OUT/gpu_tests.xml" > "$OUT/gpu_tests.txt" 2>&1
  gpu_rc=$?
  if [ $gpu_rc != 0 ]; then  # JUnit is written at the end: rerun with the streaming console reporter
    echo "==== rerun, console reporter (junit run rc $gpu_rc)" >> "$OUT/gpu_tests.txt"
    timeout 300 "$bin" "[gpu]~[init]" --durations yes >> "$OUT/gpu_tests.txt" 2>&1
  fi
  echo "==== [init]" >> "$OUT/gpu_tests.txt"
  timeout 60 "$bin" "[init]" --durations yes >> "$OUT/gpu_tests.txt" 2>&1
  init_rc=$?
  echo "==== comm_test (host backend)" >> "$OUT/gpu_tests.txt"
  timeout 120 "$BUILD_DIR/bin/comm_test" --durations no 2>&1 | tail -3 >> "$OUT/gpu_tests.txt"
fi
gpu_s=$(secs)

# 3. Full build (keep going past failures) and the ordinary suites.
full_rc=-1; ctest_rc=-1
if [ "${VERL_GPU_ONLY:-0}" != 1 ]; then
  echo "==== full build" >> "$OUT/build.log"
  timeout "${VERL_FULL_BUILD_TIMEOUT:-300}" ninja -C "$BUILD_DIR" -j16 -k 0 >> "$OUT/build.log" 2>&1
  full_rc=$?
  (cd "$BUILD_DIR" && timeout "${VERL_CTEST_TIMEOUT:-120}" ctest -j8 --timeout 100 -LE "gpu|e2e" --output-on-failure) \
    > "$OUT/ctest.log" 2>&1
  ctest_rc=$?
fi

python3 - "$OUT" <<PY
import json, sys, re, xml.etree.ElementTree as ET
out = sys.argv[1]
s = {"build_rc": $build_rc, "build_s": $build_s, "gpu_rc": $gpu_rc, "init_rc": $init_rc, "gpu_s": $gpu_s,
     "full_build_rc": $full_rc, "ctest_rc": $ctest_rc, "total_s": $(secs)}
try:
    root = ET.parse(out + "/gpu_tests.xml").getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    s["gpu_cases"] = sum(int(x.get("tests", 0)) for x in suites)
    s["gpu_failures"] = sum(int(x.get("failures", 0)) + int(x.get("errors", 0)) for x in suites)
except Exception as e:
    s["gpu_junit_error"] = str(e)
try:
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", open(out + "/ctest.log").read())
    if m: s["ctest"] = {"passed_pct": int(m[1]), "failed": int(m[2]), "total": int(m[3])}
except Exception:
    pass
json.dump(s, open(out + "/summary.json", "w"), indent=1)
print(json.dumps(s))
PY
