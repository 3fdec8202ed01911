#!/usr/bin/env bash
# Builds both release wheels, x86_64 (native) and aarch64 (cross-compiled with
# native/cmake/aarch64-linux-gnu.toolchain.cmake), and checks each with
# tools/release/wheel_checks.py against its own architecture's libexecutorch.so.
#
#   bash tools/release/build_wheels.sh [OUT_DIR]      # default: dist/
#
# Needs: the development venv (tools/setup.sh), g++-aarch64-linux-gnu, and
# network access to PyPI once (the aarch64 executorch wheel is cached in
# $ETRT_ARM_CACHE, default ~/.cache/executorch-tensorrt-arm). docs/aarch64.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=.venv/bin/python
OUT=${1:-dist}
CACHE=${ETRT_ARM_CACHE:-$HOME/.cache/executorch-tensorrt-arm}
ET_VERSION=$("$PY" -c "import tomllib; print(tomllib.load(open('pins.toml','rb'))['python']['executorch'])")
command -v aarch64-linux-gnu-g++ >/dev/null || {
  echo "release: aarch64-linux-gnu-g++ not found (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }
mkdir -p "$OUT" "$CACHE"
rm -f "$OUT"/executorch_tensorrt-*.whl

echo "release: x86_64 wheel"
"$PY" -m build --wheel --no-isolation --outdir "$OUT" -C build-dir=build/release-x86_64 .
"$PY" tools/release/wheel_checks.py "$OUT"/executorch_tensorrt-*_x86_64.whl

echo "release: aarch64 executorch $ET_VERSION (headers and libexecutorch.so to build against)"
ET_SITE="$CACHE/executorch-$ET_VERSION-aarch64"
if [ ! -f "$ET_SITE/executorch/lib/libexecutorch.so" ]; then
  "$PY" -m pip install -q --no-deps --target "$ET_SITE" --platform manylinux_2_28_aarch64 \
      --only-binary=:all: --python-version 3.11 "executorch==$ET_VERSION"
fi

echo "release: aarch64 wheel (cross-compiled)"
# The tag is given here because scikit-build-core's overrides see the build
# machine (x86_64); it is the aarch64 override's tag in pyproject.toml.
TAG=$("$PY" -c "import tomllib; o=tomllib.load(open('pyproject.toml','rb'))['tool']['scikit-build']['overrides']; print(next(x['wheel']['tags'][0] for x in o if x['if'].get('platform-machine')=='^aarch64\$'))")
"$PY" -m build --wheel --no-isolation --outdir "$OUT" -C build-dir=build/release-aarch64 \
    -C cmake.define.CMAKE_TOOLCHAIN_FILE="$ROOT/native/cmake/aarch64-linux-gnu.toolchain.cmake" \
    -C cmake.define.executorch_DIR="$ET_SITE/executorch/lib/cmake/executorch" \
    -C wheel.tags="$TAG" .
"$PY" tools/release/wheel_checks.py --libexecutorch "$ET_SITE/executorch/lib/libexecutorch.so" \
    "$OUT"/executorch_tensorrt-*_aarch64.whl

"$PY" - "$OUT" <<'PYEOF'
import sys
from pathlib import Path
wheels = {arch: w.stat().st_size for arch in ("x86_64", "aarch64")
          for w in Path(sys.argv[1]).glob(f"executorch_tensorrt-*_{arch}.whl")}
x86, arm = wheels["x86_64"], wheels["aarch64"]
print(f"release: x86_64 {x86} bytes, aarch64 {arm} bytes ({arm / x86:.3f}x)")
sys.exit(0 if arm <= 1.2 * x86 else "release: the aarch64 wheel is over 1.2x the x86_64 wheel")
PYEOF
