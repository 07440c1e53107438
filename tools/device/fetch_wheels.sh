#!/usr/bin/env bash
# Runs HERE (a machine with network): downloads the Python wheels the GPU machine lacks for benchmark B3's baseline,
# TRL's GRPOTrainer (trl, datasets and their missing dependencies; its python3 has torch, transformers, accelerate and
# pyarrow), into .device-wheels/ (git-ignored). Carry that folder to the device (run's `carry`); tools/bench/b3_grpo.py
# installs from it, without network, only what the machine cannot import, into a temporary folder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="$ROOT/.device-wheels"
mkdir -p "$DEST"
# The GPU machine: Ubuntu 24.04, CPython 3.12, x86_64 (shared/GPU.md).
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$DEST" trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash fsspec pandas pytz tzdata \
  python-dateutil
echo "[fetch_wheels] $(ls "$DEST"/*.whl | wc -l) wheels in $DEST"
