#!/usr/bin/env bash
# The TensorRT partition of a .pte through ExecuTorch's C++ runtime on the GPU
# machine (the H200 of the device tool: no ExecuTorch, no TensorRT there),
# over the FAKE, labelled stand-in engine of tools/gpu/stand_in_engine.py.
# docs/gpu-runtime.md records a run. Run from CARRY_DIR, which holds (made on
# an x86_64 machine with the package installed, tools/gpu/h200_runner_carry.sh):
#   bin/etrt_runner                    examples/cpp_runner, built against the wheel
#   lib/                               libexecutorch*.so the runner links
#   site/executorch_tensorrt/          the package (src/) with its built adapter in lib/
#   site/executorch/version.py         the executorch wheel's (the adapter's version check)
#   adapter/{executorch,executorch_tensorrt}/lib/   the same, laid out for the plan tests
#   src/ tests/ tools/                 the checkout's
#   programs/add_{device,host}.pte     out = x + y, [2, 3] float32, exported on the CPU
#
#   bash tools/gpu/h200_runner.sh OUT_DIR [CALLS]
set -uo pipefail
C=$PWD; OUT=$(realpath -m "$1"); CALLS=${2:-20000}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
PY=$(command -v python3)
"$PY" -c "import sys, sysconfig as s; print(sys.version.split()[0], sys.executable, 'shared', s.get_config_var('Py_ENABLE_SHARED'), s.get_config_var('LIBDIR'), s.get_config_var('INSTSONAME'))"
gcc -O2 -shared -fPIC -o /tmp/raw_graph_launch.so tools/gpu/raw_graph_launch.c -ldl || exit 1

# What the embedded interpreter needs: the device's python (its libpython,
# torch for the stand-in's kernel), the package, the stand-in module.
LOGS=/tmp/etrt-runner-logs; mkdir -p $LOGS  # (the device tool returns 8 files)
status=0
run() {  # NAME ENTRIES ENV...: the runner with the stand-in; ENTRIES: the Python entries expected
  local name=$1 want=$2; shift 2
  env LD_LIBRARY_PATH="$C/lib:$C/site/executorch_tensorrt/lib" EXECUTORCH_TENSORRT_PYTHON="$PY" \
      PYTHONPATH="$C/site:$C/tools/gpu" EXECUTORCH_TENSORRT_TEST_STAND_IN=stand_in_engine \
      ETRT_RAW_LAUNCH_LIB=/tmp/raw_graph_launch.so "$@" bin/etrt_runner "${RUNNER_ARGS[@]}" \
      >"$LOGS/$name.log" 2>&1
  local rc=$? got; got=$(grep -c 'executor entry' "$LOGS/$name.log")
  echo "== $name (exit $rc): $got Python executor entries over $(( ${RUNNER_ARGS[3]} * 5 + 1 )) calls"
  grep -v 'executor entry' "$LOGS/$name.log"
  [ $rc -eq 0 ] && [ "$got" = "$want" ] || { echo "FAILED: $name (expected $want entries)"; status=1; }
}
for round in 1 2 3; do
  for io in device host; do
    RUNNER_ARGS=(--model_path programs/add_$io.pte --repeat "$CALLS" --outputs "$OUT/$io.etensors")
    run "plan-$io-$round" 2  # a plain enqueue, a capture; then the adapter's plan only
  done
done
for io in device host; do  # the peer: every call through the Python executor
  RUNNER_ARGS=(--model_path programs/add_$io.pte --repeat $((CALLS / 10)))
  run "no-plan-$io" $((CALLS / 10 * 5 + 1)) EXECUTORCH_TENSORRT_NATIVE_PLAN=0
done
for io in device host; do  # the outputs equal x + y of the stored example inputs
  EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1 PYTHONPATH="$C/src" "$PY" -m executorch_tensorrt.cli \
    verify programs/add_$io.expected "$OUT/$io.etensors" --tolerance 1e-6 || status=1
done
T=$(ls tests/runtime/tensorrt/test_tensorrt_*_gpu.py tests/runtime/cuda/test_objects_gpu.py)
EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1 ETRT_ADAPTER_DIR=$C/adapter \
  PYTHONPATH=$C/src:$C/tests/runtime:$C/tests "$PY" -m pytest -q -p no:cacheprovider $T 2>&1 |
  tee "$OUT/tests.log" | tail -3
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
