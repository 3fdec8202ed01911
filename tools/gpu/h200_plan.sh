#!/usr/bin/env bash
# The TensorRT executor's native plan on the GPU machine (no ExecuTorch there:
# the adapter and libexecutorch.so travel in ADAPTER_DIR, laid out as
# installed). docs/gpu-runtime.md records a run.
#
#   tools/gpu/h200_plan.sh ADAPTER_DIR OUT_DIR
set -uo pipefail
ADAPTER=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1 ETRT_ADAPTER_DIR=$ADAPTER
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
gcc -O2 -shared -fPIC -o /tmp/raw_graph_launch.so tools/gpu/raw_graph_launch.c -ldl || exit 1
T="tests/runtime/tensorrt/test_tensorrt_plan_gpu.py tests/runtime/tensorrt/test_tensorrt_plan_state_gpu.py
   tests/runtime/tensorrt/test_tensorrt_graphs_gpu.py
   tests/runtime/tensorrt/test_tensorrt_context_gpu.py tests/runtime/tensorrt/test_tensorrt_executor_gpu.py"
PYTHONPATH=$PWD/src:$PWD/tests/runtime:$PWD/tests python3 -m pytest -q -p no:cacheprovider $T 2>&1 |
  tee "$OUT/tests.log"
PYTHONPATH=$PWD/src python3 tools/bench/gpu.py plan "$ADAPTER" /tmp/raw_graph_launch.so \
  --json "$OUT/plan.json" 2>&1 | tee "$OUT/bench.log"
exit 0
