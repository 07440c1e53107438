#!/usr/bin/env bash
# Runs HERE (the Debian 12 development machine), not on the GPU machine: downloads the Debian packages that the GPU
# machine lacks (it has no package registry), and PyPI's nvidia-cutlass wheel (CUTLASS's C++ headers), into
# $ROOT/.device-deps/, a git-ignored folder that travels to it through the device tool's `carry`. tools/device/build.sh
# unpacks the packages there with dpkg -x into /opt/deps; tools/bench/cutlass_probe/run.sh unpacks the wheel's headers.
#
#   tools/device/fetch_deps.sh          # idempotent: skips packages already downloaded
#
# The GPU machine (Ubuntu 24.04, see shared/GPU.md) has CUDA, NCCL, torch, pyarrow and cmake/ninja, but no gRPC and
# none of the Debian -dev packages tools/setup.sh installs here. These are the ones the full CMake build needs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="$ROOT/.device-deps"

PACKAGES=(
  # gRPC 1.51 and its libraries (shared/GPU.md: enough for a probe that links gRPC, LibTorch and NCCL).
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29 protobuf-compiler-grpc libabsl-dev libabsl20220623
  libre2-dev libre2-9 libc-ares-dev libc-ares2 libprotoc32
  # Protobuf 3.21 exactly as gRPC was built against (the GPU machine's own may be a different build).
  libprotobuf-dev libprotobuf32 protobuf-compiler
  # The rest of tools/setup.sh's list.
  catch2 nlohmann-json3-dev libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libpcre2-dev libpcre2-8-0 libicu-dev libicu72
)

mkdir -p "$DEST"
cd "$DEST"
missing=()
for p in "${PACKAGES[@]}"; do
  compgen -G "${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[fetch_deps] downloading: ${missing[*]}" >&2
  apt-get download "${missing[@]}" >/dev/null
fi
# CUTLASS's C++ headers as PyPI packages them (tools/unpack_cutlass_headers.py takes out their include/ folder).
CUTLASS_WHEEL=nvidia_cutlass-4.2.0.0-py3-none-any.whl
if [ ! -f "$CUTLASS_WHEEL" ]; then
  echo "[fetch_deps] downloading $CUTLASS_WHEEL" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST" nvidia-cutlass==4.2.0.0
fi
echo "[fetch_deps] $(ls "$DEST"/*.deb | wc -l) packages, $(du -sh "$DEST" | cut -f1) in $DEST" >&2
