#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer over the torch-free code and its tests (issue 8): common/,
# controller/ (the JobService and the abort relay included, through their real-process e2e tests), the worker's RPC
# layer and communicators. Builds into build-asan/ (LibTorch code, which the worker
# links as one shared library, is built without sanitizers) and runs the suites that exercise that code, including
# the real-process controller and worker tests. Called by tools/test.sh after the main suites.
#
#   tools/sanitize.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${VERL_ASAN_BUILD_DIR:-$ROOT/build-asan}"
TESTS=(config_test data_test text_test metrics_test reward_test comm_test model_io_test controller_job_test
       controller_cluster_test controller_main_test e2e_job_service_test e2e_worker_replacement_test)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVERL_SANITIZE=ON >/dev/null
ninja -C "$BUILD" -j"$(nproc)" "${TESTS[@]}" verl-worker verl-controller verlctl verl-make-tiny-model verl-make-dataset
# detect_leaks=0: gRPC and protobuf keep process-lifetime singletons that LeakSanitizer reports at exit.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1:detect_odr_violation=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$BUILD"
regex="^($(IFS='|'; echo "${TESTS[*]}"))\$"
ctest --output-on-failure --timeout 600 -j1 -R "$regex"
