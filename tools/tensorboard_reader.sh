#!/usr/bin/env bash
# Installs the `tensorboard` Python package (and only what its event reader imports) for the test that reads our
# TensorBoard event files back with it (tests/tools/tensorboard). Idempotent (stamp); nothing goes into the checkout.
#
#   $VERL_DEPS_DIR/tensorboard-py/      tensorboard, protobuf, numpy, absl-py, packaging (pip --target, pinned)
#   $VERL_DEPS_DIR/tensorboard-python   python3 with that directory on PYTHONPATH
set -euo pipefail
DEPS_DIR="${VERL_DEPS_DIR:-$HOME/.cache/verl-cpp}"
PINS=(tensorboard==2.20.0 protobuf==7.36.2 numpy==2.4.6 absl-py==2.5.1 packaging==26.4)
TB="$DEPS_DIR/tensorboard-py"
PY="$(command -v python3)"
want="${PINS[*]} $PY"
if [ -f "$TB.stamp" ] && [ "$(cat "$TB.stamp")" = "$want" ]; then
  echo "[tensorboard] present in $TB" >&2
  exit 0
fi
echo "[tensorboard] installing ${PINS[*]} into $TB" >&2
rm -rf "$TB.tmp"
PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --disable-pip-version-check --no-compile --no-deps \
  --target "$TB.tmp" "${PINS[@]}"
rm -rf "$TB" && mv "$TB.tmp" "$TB"
printf '#!/bin/sh\nPYTHONPATH="%s" exec "%s" "$@"\n' "$TB" "$PY" > "$DEPS_DIR/tensorboard-python"
chmod +x "$DEPS_DIR/tensorboard-python"
"$DEPS_DIR/tensorboard-python" -c "from tensorboard.backend.event_processing import event_accumulator" ||
  { echo "[tensorboard] the installed package does not import" >&2; exit 1; }
echo "$want" > "$TB.stamp"
