"""TEST-ONLY hooks: what the GPU stand-in runs (tools/gpu/stand_in_engine.py,
the GPU tests and benchmarks) needs from the runtime, kept out of the
executors. No GPU that can be reached runs a TensorRT engine, so the TensorRT
executor is exercised there around a FAKE, labelled engine.

- STAND_IN_ENV names a module whose `tensorrt_executor` (an ExecutorFactory)
  replaces the TensorRT executor's; never set unless a test or benchmark asks,
  and every load it serves says so on stderr.
- `executor_over_bound_context` wraps a context bound elsewhere (a stand-in's)
  in a TensorRT executor with no engine of its own.
"""
from __future__ import annotations

import importlib
import os
import sys

from ..errors import ArgumentError
from .executor import STAND_IN_ENV



def stand_in_factory():
    """The labelled stand-in factory STAND_IN_ENV names, or None when unset."""
    module_name = os.environ.get(STAND_IN_ENV)
    if not module_name:
        return None
    try:
        factory = importlib.import_module(module_name).tensorrt_executor
    except (ImportError, AttributeError) as e:
        raise ArgumentError(f"{STAND_IN_ENV}={module_name!r} (a test-only stand-in engine) "
                            f"names no importable module with a tensorrt_executor: {e}; "
                            f"unset it to run TensorRT") from None

    def labelled(blob, named_data, device):
        print(f"[executorch_tensorrt] FAKE TensorRT engine: {STAND_IN_ENV}={module_name} "
              f"runs this partition with a test-only stand-in", file=sys.stderr, flush=True)
        return factory(blob, named_data, device)

    return labelled


def executor_over_bound_context(bound):
    """A TensorRTExecutor around `bound` (a BoundContext made elsewhere), with
    no engine of its own: loading needs a TensorRT engine, which no reachable
    GPU runs. Only execute, native_plan and withdraw_native_plan work; plans
    are published."""
    from .tensorrt.executor import TensorRTExecutor

    executor = object.__new__(TensorRTExecutor)
    executor.bound = bound
    executor._start_plans(True)
    return executor
