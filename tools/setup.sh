#!/usr/bin/env bash
# Creates .venv with the pinned dependencies (pins.toml) and installs
# executorch-tensorrt into it, compiling the native adapter. Safe to re-run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || { echo "setup: $PYTHON not found (set PYTHON=...)" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PY=.venv/bin/python
mkdir -p build
# Requirements generated from the single source of truth.
"$PY" - >build/pinned-requirements.txt <<'PYEOF'
import tomllib
pins = tomllib.load(open("pins.toml", "rb"))["python"]
print("\n".join(f"{name}=={version}" for name, version in pins.items()))
PYEOF
echo "setup: installing pinned dependencies into .venv ($(tr '\n' ' ' <build/pinned-requirements.txt))"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -r build/pinned-requirements.txt \
    scikit-build-core pytest pyelftools packaging build
echo "setup: building the native adapter and installing executorch-tensorrt"
"$PY" -m pip install -q --no-build-isolation --force-reinstall --no-deps .
"$PY" -m pip check >/dev/null || { "$PY" -m pip check; exit 1; }
# optimum-executorch beside the venv, without its dependencies (pins.toml [optimum] says why).
"$PY" - >build/optimum-requirements.txt <<'PYEOF'
import tomllib
pins = tomllib.load(open("pins.toml", "rb"))["optimum"]
print("\n".join(f"{name}=={version}" for name, version in pins.items()))
PYEOF
echo "setup: installing $(tr '\n' ' ' <build/optimum-requirements.txt)into build/optimum-site (--no-deps)"
"$PY" -m pip install -q --no-deps --upgrade --target build/optimum-site -r build/optimum-requirements.txt
"$PY" -c "import executorch_tensorrt; print('setup: ok, TensorRTBackend registered')"
