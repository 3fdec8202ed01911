#!/usr/bin/env bash
# The device-resident end-to-end run on an NVIDIA GPU machine that has no
# ExecuTorch, TensorRT or network (the H200 of the device tool). Run from the
# repository root; docs/device-resident.md records a run and its output.
#
#   tools/gpu/h200_device_resident.sh CARRY_DIR OUT_DIR
#
# CARRY_DIR holds what that machine lacks, made on a machine with pip:
#   *.whl                     executorch (cp312), executorch_tensorrt, the
#                             tensorrt_rtx bindings, torchao and ruamel.yaml (for inspect)
#   tensorrt_rtx/, tensorrt_rtx_libs/   the TensorRT-RTX Python packages
#   libtensorrt_rtx.so.1.xz[.part*]     the TensorRT-RTX library, xz-compressed
#                             (in parts when one transfer cannot hold it)
#   libtensorrt_onnxparser_rtx.so.1.xz
#   programs/NAME.pte + NAME.expected   exported elsewhere (export cannot
#                             build TensorRT-RTX engines for SM90, and needs no GPU)
# Steps: a virtual environment over the machine's python (its CUDA PyTorch,
# onnx, onnxruntime), the C++ runner built with CMake against the installed
# packages, then for each device-resident program: inspect --device-resident,
# the runner without the fallback (TensorRT-RTX refuses this GPU: the error
# must say so), and with the onnxruntime fallback (must match eager).
set -uo pipefail
CARRY=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
VENV=/tmp/etrt-venv
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*"; exit 1; }

step "machine"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader || fail "no GPU"
python3 --version; cmake --version | head -1; g++ --version | head -1

step "virtual environment over $(command -v python3)"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV" || fail "venv"
fi
"$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile "$CARRY"/*.whl || fail "pip"
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# python3 may itself be a virtual environment (there: /opt/torch/.venv, which
# holds PyTorch), whose packages --system-site-packages does not reach.
python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" >"$SITE/base-python.pth"
cp -r "$CARRY/tensorrt_rtx" "$CARRY/tensorrt_rtx_libs" "$SITE/" || fail "copy tensorrt_rtx"
"$VENV/bin/python" - "$CARRY" "$SITE/tensorrt_rtx_libs" <<'PY' || fail "unpack TensorRT-RTX"
import glob, lzma, os, sys
carry, dst = sys.argv[1], sys.argv[2]
for name in ("libtensorrt_rtx.so.1", "libtensorrt_onnxparser_rtx.so.1"):
    parts = sorted(glob.glob(f"{carry}/{name}.xz.part*")) or [f"{carry}/{name}.xz"]
    with open(f"{dst}/{name}", "wb") as f:
        f.write(lzma.decompress(b"".join(open(p, "rb").read() for p in parts)))
    print(name, os.path.getsize(f"{dst}/{name}"), "bytes")
PY
"$VENV/bin/python" -c "import tensorrt_rtx as t; print('tensorrt_rtx', t.__version__)" || fail "tensorrt_rtx"

step "C++ runner (examples/cpp_runner) against the installed packages"
cmake -S examples/cpp_runner -B /tmp/etrt-runner -DCMAKE_PREFIX_PATH="$SITE/executorch;$SITE/executorch_tensorrt" \
  >"$OUT/cmake.log" 2>&1 && cmake --build /tmp/etrt-runner >>"$OUT/cmake.log" 2>&1 || { cat "$OUT/cmake.log"; fail "build"; }
RUNNER=/tmp/etrt-runner/etrt_runner
ETRT=("$VENV/bin/python" -m executorch_tensorrt.cli)
# inspect and verify read files only: they need no adapter (whose import
# would load executorch's Python runtime, built for another PyTorch).
export EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1
status=0
for pte in "$CARRY"/programs/*.pte; do
  name=$(basename "$pte" .pte)
  step "$name: inspect --device-resident"
  "${ETRT[@]}" inspect --device-resident "$pte" || status=1
  step "$name: C++ runner, no fallback (TensorRT-RTX does not support this GPU)"
  env -u EXECUTORCH_TENSORRT_SKIP_REGISTRATION "$RUNNER" --model_path "$pte"; rc=$?
  echo "exit status $rc"; [ $rc -ne 0 ] || status=1
  step "$name: C++ runner, EXECUTORCH_TENSORRT_FALLBACK=onnxruntime"
  env -u EXECUTORCH_TENSORRT_SKIP_REGISTRATION EXECUTORCH_TENSORRT_FALLBACK=onnxruntime \
    "$RUNNER" --model_path "$pte" >"$OUT/$name.out"; rc=$?
  cat "$OUT/$name.out"; echo "exit status $rc"; [ $rc -eq 0 ] || status=1
  step "$name: verify against the eager reference"
  "${ETRT[@]}" verify "${pte%.pte}.expected" "$OUT/$name.out" --tolerance 1e-4 || status=1
done
step "result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
