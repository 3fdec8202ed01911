#!/usr/bin/env bash
# The TensorRT executor's GPU tests, their guards and the per-call overhead
# benchmark on a GPU machine without ExecuTorch or TensorRT (the H200 of the
# device tool); docs/gpu-runtime.md and docs/evidence/h200-gpu-runtime.log record a run.
# Run from a copy of the repository (src/, tests/, tools/, pyproject.toml):
#
#   tools/gpu/h200_gpu_runtime.sh OUT_DIR [OLD_SRC]
#
# OLD_SRC: another checkout's src/ whose BoundContext the overhead benchmark
# also times (the before column). tools/bench/gpu.py run needs TensorRT-RTX
# carried there as in tools/gpu/h200_device_resident.sh; docs/benchmarks.md says
# what it printed.
set -uo pipefail
OUT=$(realpath -m "$1"); OLD=${2:-}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1
T="tests/runtime/tensorrt/test_tensorrt_executor_gpu.py tests/runtime/tensorrt/test_tensorrt_stages_gpu.py
   tests/runtime/tensorrt/test_tensorrt_context_gpu.py tests/runtime/tensorrt/test_tensorrt_graphs_gpu.py
   tests/runtime/cuda/test_cuda_options.py"
PYTHONPATH=$PWD/src:$PWD/tests python3 -m pytest -v -p no:cacheprovider $T 2>&1 | tee "$OUT/tests.log"
python3 tools/gpu/gpu_test_guards.py "$PWD/src" > "$OUT/guards.log"
for g in $(ls /tmp/guard); do
  echo "--- guard $g" >> "$OUT/guards.log"
  PYTHONPATH=/tmp/guard/$g:$PWD/tests python3 -m pytest -q -p no:cacheprovider $T 2>&1 |
    grep -E "^(FAILED|ERROR)|passed|failed" >> "$OUT/guards.log"
done
cat "$OUT/guards.log"
PYTHONPATH=$PWD/src python3 tools/bench/gpu.py overhead --json "$OUT/overhead_new.json"
[ -n "$OLD" ] && PYTHONPATH=$OLD python3 tools/bench/gpu.py overhead --json "$OUT/overhead_old.json"
exit 0
