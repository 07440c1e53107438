#!/usr/bin/env bash
# GRPO from a real pretrained model on CPU: SmolLM2-135M-Instruct learns single-digit sums (configs/smollm2_digit_sums.yaml).
# Sets up what it needs (tools/setup.sh, tools/hf/setup_assets.sh for the model, verl-make-dataset for the data),
# then runs verl-controller. Validation (greedy, 64 held-out prompts) runs before the first step and every
# trainer.test_freq steps; val-core/verl_cpp/digit_sums/reward/mean@1 is the accuracy. Extra arguments are config
# overrides, e.g.  tools/hf/grpo_digit_sums.sh trainer.total_training_steps=10
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
tools/setup.sh
tools/hf/setup_assets.sh
HF="${VERL_HF_DIR:-${VERL_DEPS_DIR:-$HOME/.cache/verl-cpp}/hf}"
BIN="${VERL_BUILD_DIR:-$ROOT/build}/bin"
[ -f data/digit_sums/train.parquet ] || "$BIN/verl-make-dataset" --task digit_sums --out-dir data/digit_sums
exec "$BIN/verl-controller" --config configs/smollm2_digit_sums.yaml \
  actor_rollout_ref.model.path="$HF/models/smollm2-135m-instruct" "$@"
