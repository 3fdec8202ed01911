#!/usr/bin/env bash
# Makes CARRY_DIR for tools/gpu/h200_runner.sh on an x86_64 machine with the
# package installed in .venv: the C++ runner built against the wheel, the
# libraries it links, the package with its adapter, this checkout's src,
# tests and tools, and the two programs (exported here, on the CPU).
#   bash tools/gpu/h200_runner_carry.sh CARRY_DIR
set -euo pipefail
C=$(realpath -m "$1"); rm -rf "$C"; mkdir -p "$C"/{bin,lib,site,programs,adapter/executorch/lib}
SITE=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cmake -S examples/cpp_runner -B /tmp/etrt-gpu-runner -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$SITE/executorch;$SITE/executorch_tensorrt" >/dev/null
cmake --build /tmp/etrt-gpu-runner -j2 >/dev/null
cp /tmp/etrt-gpu-runner/etrt_runner "$C/bin/"
for lib in $(readelf -d "$C/bin/etrt_runner" | sed -n 's/.*Shared library: \[\(libexecutorch[a-z_]*\.so\)\]/\1/p'); do
  [ "$lib" = libexecutorch_backend_tensorrt.so ] || cp "$SITE/executorch/lib/$lib" "$C/lib/"
done
cp -r src/executorch_tensorrt "$C/site/"
cp -r "$SITE/executorch_tensorrt/lib" "$SITE/executorch_tensorrt/include" "$C/site/executorch_tensorrt/"
# The executorch wheel's version module alone: the package checks that the
# adapter was built against the ExecuTorch that runs (the runtime itself is lib/).
mkdir -p "$C/site/executorch" && cp "$SITE/executorch/version.py" "$C/site/executorch/"
cp "$SITE/executorch/lib/libexecutorch.so" "$C/adapter/executorch/lib/"
mkdir -p "$C/adapter/executorch_tensorrt" && cp -r "$SITE/executorch_tensorrt/lib" "$C/adapter/executorch_tensorrt/"
cp -r src tests tools "$C/"
find "$C" -name __pycache__ -prune -exec rm -rf {} +
.venv/bin/python - "$C/programs" <<'PY'
import sys, torch, executorch_tensorrt
class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y
torch.manual_seed(0)
args = (torch.randn(2, 3), torch.randn(2, 3))
executorch_tensorrt.export(Add(), args, f"{sys.argv[1]}/add_host.pte", progress=None)
executorch_tensorrt.export(Add(), args, f"{sys.argv[1]}/add_device.pte", device_resident=True,
                           device_id=0, progress=None)
PY
du -sh "$C"
