"""Builds one tiny TensorRT-RTX engine for the DGX Spark's GB10 (SM121) on
aarch64: run under qemu-aarch64 with the aarch64 tensorrt-rtx-cu13 wheels on
the path (docs/aarch64.md, "The [rtx] extra on aarch64"). No GPU is needed:
TensorRT-RTX builds on the CPU. The engine is built by our own builder
(executorch_tensorrt.tensorrt.engine_builder) from a two-input Add in ONNX.

    python3.11 emulated_rtx_build.py
"""
from __future__ import annotations

import platform
import sys
import time


def main() -> int:
    start = time.monotonic()
    import onnx
    from onnx import TensorProto, helper

    import tensorrt_rtx
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.options import BuildOptions

    print(f"rtx: machine {platform.machine()}, tensorrt_rtx {tensorrt_rtx.__version__} "
          f"from {tensorrt_rtx.__file__}; imports {time.monotonic() - start:.1f} s", flush=True)
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("x", "y", "z")]
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add",
                              spec[:2], spec[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built = build_engine(model.SerializeToString(), BuildOptions(compute_capabilities=("SM121",)),
                         label="emulated add")
    print(f"rtx: built an engine for {built.compute_capabilities} with {built.flavor} "
          f"{built.version}: {len(built.engine)} bytes in {built.build_seconds:.1f} s; "
          f"total {time.monotonic() - start:.1f} s")
    return 0 if built.engine and built.compute_capabilities == ("SM121",) else 1


if __name__ == "__main__":
    sys.exit(main())
