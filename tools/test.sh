#!/usr/bin/env bash
# Sets everything up (tools/setup.sh: dependencies + build, tests included) and runs every test with CTest.
# GPU tests are tagged [gpu] and skip themselves on a machine without a GPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/tools/setup.sh"
# Real-model assets of the HF parity tests ([hf]; they skip without them): a few minutes the first time, then < 1 s.
"$ROOT/tools/hf/setup_assets.sh"
# tensorboard and kubernetes-validate, to check our event files and manifests with the real tools: seconds.
"$ROOT/tools/test_python.sh"
(cd "${VERL_BUILD_DIR:-$ROOT/build}" && ctest --output-on-failure --timeout 600 -j1)
# The torch-free code and its tests again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/).
"$ROOT/tools/sanitize.sh"
# A short libFuzzer run of each parser target (build-fuzz/, clang; 20 s each).
"$ROOT/tools/fuzz.sh"
