#!/usr/bin/env bash
# Runs THERE (the GPU machine of the device tool; shared/GPU.md): unpacks the Debian packages that
# tools/device/fetch_deps.sh downloaded (carried in .device-deps/) into /opt/deps, points pkg-config and the linker at
# them, and configures and builds the project with -DVERL_WITH_CUDA=ON against that machine's python3 torch
# (2.11.0+cu130), pyarrow and NCCL (pip nvidia-nccl-cu13), into build-cuda/.
#
#   tools/device/build.sh                    # configure + build everything
#   tools/device/build.sh nccl_comm_test     # configure + build the named targets only
#
# Source it (`. tools/device/build.sh --env-only`) to get only the environment (PATH, PKG_CONFIG_PATH,
# LD_LIBRARY_PATH, NCCL variables) for running binaries afterwards.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEBS="${VERL_DEVICE_DEPS:-$ROOT/.device-deps}"
PREFIX="${VERL_DEVICE_PREFIX:-/opt/deps}"
BUILD_DIR="${VERL_BUILD_DIR:-$ROOT/build-cuda}"
JOBS="${VERL_JOBS:-16}"

# NVLink multicast must stay off on the shared multi-GPU hosts (device KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
export PATH="$PREFIX/usr/bin:$PATH"
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ "${1:-}" = --env-only ] && return 0 2>/dev/null

log() { echo "[device/build] $*" >&2; }

# Carried packages unpacked even where the machine has its own: Ubuntu 24.04's catch2 is 3.x (no catch2/catch.hpp).
FORCE=" catch2 "

# 1. Debian packages -> $PREFIX (never into /). A package the machine already has installed under the same name is
#    skipped: its own build is used (e.g. yaml-cpp 0.8, spdlog 1.12, protobuf 3.21.12 there); mixing a carried
#    library with the machine's headers of another version crashed at run time (config_test, seen 2026-11-30).
stamp="$( (ls "$DEBS"; sed -n '/^FORCE=/,/^fi$/p' "${BASH_SOURCE[0]}") | md5sum | cut -d' ' -f1)"
if [ "$(cat "$PREFIX/.unpacked" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$PREFIX" "$BUILD_DIR/CMakeCache.txt"  # a new set of libraries: find them all again
  compgen -G "$DEBS/*.deb" >/dev/null || { log "no .deb in $DEBS: run tools/device/fetch_deps.sh here, carry .device-deps"; exit 1; }
  mkdir -p "$PREFIX"
  for deb in "$DEBS"/*.deb; do
    pkg="$(dpkg-deb -f "$deb" Package)"
    if [[ "$FORCE" != *" $pkg "* ]] && dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      log "skip $pkg (installed here: $(dpkg-query -W -f='${Version}' "$pkg"))"
      continue
    fi
    dpkg -x "$deb" "$PREFIX"
  done
  # pkg-config files say prefix=/usr.
  for pc in "$LIBDIR"/pkgconfig/*.pc "$PREFIX"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i "s#^prefix=/usr\$#prefix=$PREFIX/usr#; s#^prefix=/usr/#prefix=$PREFIX/usr/#" "$pc"
  done
  echo "$stamp" > "$PREFIX/.unpacked"
  log "unpacked $(ls "$DEBS"/*.deb | wc -l) packages into $PREFIX"
fi

# 2. python3's torch, pyarrow and NCCL.
PY="${PYTHON:-python3}"
TORCH_ROOT="$("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
PYARROW_ROOT="$("$PY" -c 'import pyarrow, os; print(os.path.dirname(pyarrow.__file__))')"
NCCL_ROOT="$("$PY" -c 'import nvidia.nccl; print(nvidia.nccl.__path__[0])')"
log "torch $("$PY" -c 'import torch; print(torch.__version__)') in $TORCH_ROOT; pyarrow in $PYARROW_ROOT; NCCL in $NCCL_ROOT"

# 3. Configure and build. "-include cstdint": Abseil 20220623's headers predate GCC 13's leaner <string>;
# CMAKE_POLICY_VERSION_MINIMUM: CMake 4 there refuses old Debian package configs that ask for CMake < 3.5.
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"  # worker/kernels
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVERL_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCMAKE_CXX_FLAGS="-include cstdint" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  $( [ -f "$PREFIX/usr/lib/cmake/Catch2/Catch2Config.cmake" ] && echo "-DCatch2_DIR=$PREFIX/usr/lib/cmake/Catch2" ) \
  -DVERL_TORCH_ROOT="$TORCH_ROOT" -DVERL_PYARROW_ROOT="$PYARROW_ROOT" -DVERL_NCCL_ROOT="$NCCL_ROOT"
# 4. A warm machine keeps build-cuda/ between calls, but each call copies the working tree afresh: a source put back to
#    an older version (a patch undone, a branch switched) can carry an mtime older than the object built from the newer
#    one, and ninja would link that stale object (seen 2026-12-07). Sources whose content changed since the last build
#    are touched first, so ninja decides on content.
sums="$BUILD_DIR/.source-md5"
(cd "$ROOT" && find CMakeLists.txt cmake common controller worker tests tools proto -type f \
  \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.proto' -o -name '*.txt' -o -name '*.cmake' \) \
  -print0 2>/dev/null | sort -z | xargs -0 md5sum) > "$sums.new"
if [ -f "$sums" ]; then
  changed="$(comm -13 <(sort "$sums") <(sort "$sums.new") | cut -d' ' -f3-)"
  if [ -n "$changed" ]; then
    (cd "$ROOT" && echo "$changed" | tr '\n' '\0' | xargs -0 touch)
    log "touched $(echo "$changed" | wc -l) source(s) changed since the last build"
  fi
fi
mv "$sums.new" "$sums"
ninja -C "$BUILD_DIR" -j"$JOBS" "$@"
