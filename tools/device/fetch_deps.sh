#!/usr/bin/env bash
# Runs HERE (the Debian 12 development machine), not on the GPU machine: downloads the Debian packages that the GPU
# machine lacks (it has no package registry) into $ROOT/.device-deps/, a git-ignored folder that travels to it through
# the device tool's `carry`. tools/device/build.sh unpacks them there with dpkg -x into /opt/deps.
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
echo "[fetch_deps] $(ls "$DEST"/*.deb | wc -l) packages, $(du -sh "$DEST" | cut -f1) in $DEST" >&2
