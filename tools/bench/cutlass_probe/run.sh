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
#   PROBE_UNITS="h j" ...   # compiles only cfg_h.cu and cfg_j.cu (the others register nothing): minutes fewer
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
# Each unit registers its instantiations through one function (probe.cuh); a unit left out of PROBE_UNITS gets an
# empty one instead, so compiling the probe for a few shapes takes a few of the units' minutes.
declare -A REGISTER=([a]="RegisterA(std::vector<ProbeGemm>&)" [b]="RegisterB(std::vector<ProbeGemm>&)"
  [c]="RegisterC(std::vector<ProbeGemm>&)" [d]="RegisterD(std::vector<ProbeGemm>&)"
  [e]="RegisterE(std::vector<ProbeGemm>&)" [f]="RegisterF(std::vector<ProbeGemm>&)"
  [g]="RegisterG(std::vector<ProbeGemm>&)" [h]="RegisterH(std::vector<ProbeGemm>&)"
  [i]="RegisterI(std::vector<ProbeGemm>&)" [j]="RegisterChains(std::vector<DecodeChain>&)")
UNITS="${PROBE_UNITS:-a b c d e f g h i j}"
srcs=("$HERE/main.cu")
{
  echo '#include "probe.cuh"'
  for u in a b c d e f g h i j; do
    case " $UNITS " in
      *" $u "*) srcs+=("$HERE/cfg_$u.cu") ;;
      *) echo "void ${REGISTER[$u]} {}" ;;
    esac
  done
} > "$BUILD/stubs.cu"
srcs+=("$BUILD/stubs.cu")
pids=()
objs=()
for src in "${srcs[@]}"; do
  obj="$BUILD/$(basename "$src" .cu).o"
  "$NVCC" "${FLAGS[@]}" -c "$src" -o "$obj" &
  pids+=($!)
  objs+=("$obj")
done
for p in "${pids[@]}"; do wait "$p"; done
"$NVCC" -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$BUILD/cutlass_probe" -lcublasLt -lcublas
[ "${PROBE_BUILD_ONLY:-0}" = 1 ] && exit 0
"$BUILD/cutlass_probe" "$@" > "$OUT_JSON"
echo "[cutlass_probe] $(grep -c '"m"' "$OUT_JSON") results in $OUT_JSON"
