#!/usr/bin/env bash
# Installs everything verl-cpp needs to build and run on Debian 12, then configures and builds it.
# Idempotent: on a machine that already has the dependencies it only (re)builds, which takes seconds.
#
#   tools/setup.sh            # install deps, configure and build into build/
#   VERL_SKIP_BUILD=1 tools/setup.sh   # only install deps
#   VERL_APT_ONLY=1 tools/setup.sh     # only the Debian packages (the Dockerfile brings its own torch)
#
# Debian packages come from apt-get. LibTorch comes from PyPI's torch wheel (pinned to the GPU machine's 2.11.0) and
# Arrow/Parquet C++ from PyPI's pyarrow wheel; both are unpacked (no dependencies) into $VERL_DEPS_DIR, which is
# outside the checkout so every clone on the machine shares it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS_DIR="${VERL_DEPS_DIR:-$HOME/.cache/verl-cpp}"
TORCH_VERSION=2.11.0
PYARROW_VERSION=25.0.1
BUILD_DIR="${VERL_BUILD_DIR:-$ROOT/build}"

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config python3-pip
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libyaml-cpp-dev catch2 nlohmann-json3-dev libpcre2-dev libicu-dev libspdlog-dev libfmt-dev
  prometheus  # promtool and a real server for the /metrics tests (not started as a service here)
  clang libclang-rt-14-dev  # libFuzzer (tools/fuzz.sh)
  openssl python3-grpcio python3-protobuf  # JobService tests: certificates, a Python gRPC client
  iproute2  # the two-network-namespace data-parallel test (ip netns)
)

log() { echo "[setup] $*" >&2; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages: present"
fi

[ "${VERL_APT_ONLY:-0}" = 1 ] && exit 0

PY="$DEPS_DIR/py"
stamp="$DEPS_DIR/py.stamp"
want="torch==$TORCH_VERSION pyarrow==$PYARROW_VERSION"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing PyPI wheels ($want) into $PY (about 1 GB, a few minutes)"
  mkdir -p "$DEPS_DIR"
  rm -rf "$PY.tmp"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-deps --target "$PY.tmp" \
    "torch==$TORCH_VERSION" "pyarrow==$PYARROW_VERSION"
  rm -rf "$PY" && mv "$PY.tmp" "$PY"
  echo "$want" > "$stamp"
else
  log "LibTorch $TORCH_VERSION and Arrow $PYARROW_VERSION: present in $PY"
fi

# The CUDA wheel's libtorch_cpu.so records libcudart and libcupti as needed libraries even for CPU work. Machines with
# the CUDA toolkit have them; elsewhere install the NVIDIA runtime wheels that provide them.
if ldd "$PY/torch/lib/libtorch_cpu.so" | grep -q "not found"; then
  NV="$DEPS_DIR/nvidia"
  if [ ! -d "$NV" ]; then
    log "installing the CUDA runtime libraries LibTorch links against"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-deps --target "$NV.tmp" \
      nvidia-cuda-runtime nvidia-cuda-cupti
    mv "$NV.tmp" "$NV"
  fi
fi

[ "${VERL_SKIP_BUILD:-0}" = 1 ] && exit 0

log "configuring and building in $BUILD_DIR"
# VERL_CMAKE_ARGS: extra configure arguments, e.g. "-DVERL_WITH_CUDA=ON -DVERL_BUILD_TESTS=OFF" (the Dockerfile).
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVERL_DEPS_DIR="$DEPS_DIR" ${VERL_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
