"""Probe (H200, device tool): does TensorRT-RTX build a weight-stripped,
refittable plan when a CUDA device is present, and how far does the refit
path get on a GPU it refuses to run (SM90)? Throwaway evidence for
docs/big-models.md, not product code.

    PYTHONPATH=/tmp/site:$PWD/src EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1 \
        python3 tools/experiments/exp_h200_stripped.py
"""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper

from executorch_tensorrt.errors import EngineBuildError
from executorch_tensorrt.tensorrt.engine_builder import build_engine
from executorch_tensorrt.tensorrt.flavor import collecting_logger, load_tensorrt
from executorch_tensorrt.tensorrt.options import BuildOptions

N = 1024
rng = np.random.default_rng(0)
W = rng.standard_normal((N, N), dtype=np.float32)
w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[N, N])
w.data_location = TensorProto.EXTERNAL
w.external_data.add(key="location", value="etrt-named-data")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, N])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, N])
graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g", [x], [y], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
onnx_bytes = model.SerializeToString()
weights = [("W", W.ctypes.data, W.nbytes)]

trt = load_tensorrt()
report = {"tensorrt": f"{trt.flavor} {trt.version}", "weight_bytes": W.nbytes,
          "onnx_bytes": len(onnx_bytes)}
options = BuildOptions(compute_capabilities=("SM89",))
for label, stripped in (("full", False), ("stripped", True)):
    try:
        built = build_engine(onnx_bytes, options, label=label, initializers=weights,
                             weights_id=label, stripped=stripped, progress=None)
        report[label] = {"plan_bytes": len(built.engine), "seconds": round(built.build_seconds, 2)}
    except EngineBuildError as e:
        report[label] = {"error": str(e)[:400]}

if "plan_bytes" in report.get("stripped", {}):
    logger = collecting_logger(trt)
    runtime = trt.module.Runtime(logger)
    plan = build_engine(onnx_bytes, options, label="stripped", initializers=weights,
                        weights_id="stripped", stripped=True, progress=None).engine
    engine = runtime.deserialize_cuda_engine(plan)
    report["deserialize"] = ("ok" if engine is not None
                             else "refused: " + "; ".join(logger.messages[-2:])[:400])
print(json.dumps(report, indent=1))
