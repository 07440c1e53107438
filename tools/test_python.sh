#!/usr/bin/env bash
# Installs the Python packages some tests use to check our output with the real tools (nothing of the project runs on
# Python): `tensorboard` reads our event files back (tests/tools/tensorboard) and `kubernetes-validate` checks the
# Kubernetes manifests offline against the API's schemas (tests/deploy). Idempotent (stamp); nothing goes into the
# checkout; about 10 s the first time.
#
#   $VERL_DEPS_DIR/test-py/      the pinned packages below (pip --target, no dependency resolution: all are listed)
#   $VERL_DEPS_DIR/test-python   python3 with that directory on PYTHONPATH
set -euo pipefail
DEPS_DIR="${VERL_DEPS_DIR:-$HOME/.cache/verl-cpp}"
PINS=(
  # tensorboard's event reader and what it imports
  tensorboard==2.20.0 protobuf==7.36.2 numpy==2.4.6 absl-py==2.5.1 packaging==26.4
  # kubernetes-validate (bundles the Kubernetes OpenAPI schemas) and its dependencies
  kubernetes-validate==1.37.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
  rpds-py==2026.9.1 attrs==26.1.0 pyyaml==6.0.4 importlib-resources==7.1.0 typing-extensions==4.16.0
)
DIR="$DEPS_DIR/test-py"
PY="$(command -v python3)"
want="${PINS[*]} $PY"
if [ -f "$DIR.stamp" ] && [ "$(cat "$DIR.stamp")" = "$want" ]; then
  echo "[test-python] present in $DIR" >&2
  exit 0
fi
echo "[test-python] installing ${PINS[*]} into $DIR" >&2
rm -rf "$DIR.tmp"
PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --disable-pip-version-check --no-compile --no-deps \
  --target "$DIR.tmp" "${PINS[@]}"
rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
printf '#!/bin/sh\nPYTHONPATH="%s" exec "%s" "$@"\n' "$DIR" "$PY" > "$DEPS_DIR/test-python"
chmod +x "$DEPS_DIR/test-python"
"$DEPS_DIR/test-python" -c "from tensorboard.backend.event_processing import event_accumulator; import kubernetes_validate, yaml" ||
  { echo "[test-python] the installed packages do not import" >&2; exit 1; }
echo "$want" > "$DIR.stamp"
