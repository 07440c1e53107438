#!/usr/bin/env bash
# Probe (GPU machine): CUTLASS's Hopper GEMMs at bench-0.5b's four projections against cuBLASLt, at decode and trainer
# row counts (docs/decisions.md): the MLP's stacked gate/up projection with SwiGLU in the epilogue (against cuBLASLt's
# GEMM followed by a SwiGLU kernel), Q/K/V, and the attention output and down projections adding the residual; and
# the down projection's input-gradient GEMM with SwiGLU's backward in its epilogue (against cuBLASLt + a kernel); and
# the rollout's attention output + folded gate/up projections with the post-attention norm carried by their epilogues
# (decode_mlp, against two cuBLASLt GEMMs + the SwiGLU-norm kernel).
#
#   [PROBE_SHAPES=gate_up,qkv,o,down,swiglu_bwd,decode_mlp] \
#     tools/bench/cutlass_probe/run.sh OUT.json [BUILD_DIR [ITERS [M ...]]]
#   PROBE_BUILD_ONLY=1 tools/bench/cutlass_probe/run.sh - BUILD_DIR   # only builds BUILD_DIR/cutlass_probe
#
# CUTLASS's headers come from PyPI's nvidia-cutlass wheel in .device-deps/ (tools/device/fetch_deps.sh), unpacked into
# BUILD_DIR; nothing is installed. Needs nvcc (CUDA 12.4 or later, sm_90a) and cuBLASLt.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
OUT_JSON="$1"
BUILD="${2:-${TMPDIR:-/tmp}/verl-cutlass-probe}"
shift $(( $# < 2 ? $# : 2 ))
WHEEL="$(ls "$ROOT"/.device-deps/nvidia_cutlass-*.whl 2>/dev/null | head -1)"
[ -n "$WHEEL" ] || { echo "no nvidia_cutlass wheel in .device-deps: run tools/device/fetch_deps.sh" >&2; exit 1; }
mkdir -p "$BUILD"
[ -f "$BUILD/cutlass/include/cutlass/cutlass.h" ] ||
  python3 "$ROOT/tools/unpack_cutlass_headers.py" "$WHEEL" "$BUILD/cutlass"
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
FLAGS=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I"$BUILD/cutlass/include"
       -I"$HERE" -DNDEBUG)
pids=()
for f in main cfg_a cfg_b cfg_c cfg_d cfg_e cfg_f cfg_g cfg_h cfg_i cfg_j; do
  "$NVCC" "${FLAGS[@]}" -c "$HERE/$f.cu" -o "$BUILD/$f.o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
objs=("$BUILD"/{main,cfg_a,cfg_b,cfg_c,cfg_d,cfg_e,cfg_f,cfg_g,cfg_h,cfg_i,cfg_j}.o)
"$NVCC" -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$BUILD/cutlass_probe" -lcublasLt -lcublas
[ "${PROBE_BUILD_ONLY:-0}" = 1 ] && exit 0
"$BUILD/cutlass_probe" "$@" > "$OUT_JSON"
echo "[cutlass_probe] $(grep -c '"m"' "$OUT_JSON") results in $OUT_JSON"
