#!/usr/bin/env bash
# The CPU quickstart in one command: installs dependencies (tools/setup.sh), builds, makes the tiny model and the
# synthetic dataset (once), then runs GRPO with verl-controller. Extra arguments are config overrides, e.g.
#   tools/quickstart.sh trainer.total_training_steps=50
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
tools/setup.sh
BIN="${VERL_BUILD_DIR:-$ROOT/build}/bin"
[ -f models/tiny-qwen2/model.safetensors ] || "$BIN/verl-make-tiny-model" --out-dir models/tiny-qwen2
[ -f data/repeat_letter/train.parquet ] || "$BIN/verl-make-dataset" --task repeat_letter --out-dir data/repeat_letter
exec "$BIN/verl-controller" --config configs/quickstart.yaml "$@"
