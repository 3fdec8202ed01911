"""fp16/bf16 ONNX -> fp32, for the onnxruntime fallback only.

onnxruntime's CPU provider lacks fp16/bf16 kernels for common ops (Gemm,
MatMul), so the fallback runs reduced-precision partitions in fp32: it shows
what the program computes, not the engine's rounding. TensorRT runs the
reduced-precision model as built.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

_REDUCED = {TensorProto.FLOAT16, TensorProto.BFLOAT16}


def _upcast_tensor(t: TensorProto) -> None:
    if t.data_type in _REDUCED and t.data_location == TensorProto.EXTERNAL:
        # A named-data weight (onnx_safety.py admitted only those): its bytes
        # are upcast where they are fed (ort_named_weights.py), never loaded here.
        t.data_type = TensorProto.FLOAT
        return
    if t.data_type in _REDUCED:
        array = numpy_helper.to_array(t).astype(np.float32)
        t.CopyFrom(numpy_helper.from_array(array, t.name))


def _upcast_graph(graph: onnx.GraphProto) -> None:
    for t in graph.initializer:
        _upcast_tensor(t)
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.tensor_type.elem_type in _REDUCED:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                _upcast_tensor(attr.t)
            elif attr.type == onnx.AttributeProto.GRAPH:
                _upcast_graph(attr.g)
            elif node.op_type == "Cast" and attr.name == "to" and attr.i in _REDUCED:
                attr.i = TensorProto.FLOAT


def is_reduced_precision(model: onnx.ModelProto) -> bool:
    return any(t.data_type in _REDUCED for t in model.graph.initializer) or any(
        a.name == "to" and a.i in _REDUCED for n in model.graph.node
        if n.op_type == "Cast" for a in n.attribute)


def upcast_to_fp32(model_bytes: bytes) -> bytes:
    model = onnx.load_model_from_string(model_bytes)
    _upcast_graph(model.graph)
    return model.SerializeToString()
