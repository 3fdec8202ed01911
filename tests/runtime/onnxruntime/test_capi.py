"""The GIL-holding onnxruntime binding gives what onnxruntime's Python API
gives, bit for bit, and reports onnxruntime's own errors."""
from __future__ import annotations

import ctypes

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from executorch_tensorrt.runtime.onnxruntime.capi import OrtError, OrtSession

_NP = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def model(nodes, inputs, outputs, initializers=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


rng = np.random.default_rng(0)
MODELS = {
    "relu, dynamic batch": (
        model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", 1, ["n", 5])],
              [tensor("y", 1, ["n", 5])]),
        [rng.standard_normal((3, 5), dtype=np.float32)]),
    "matmul + bias (initializers)": (
        model([helper.make_node("MatMul", ["x", "w"], ["h"]),
               helper.make_node("Add", ["h", "b"], ["y"])],
              [tensor("x", 1, [4, 8])], [tensor("y", 1, [4, 6])],
              [numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")]),
        [rng.standard_normal((4, 8), dtype=np.float32)]),
    "int64 and bool, two outputs": (
        model([helper.make_node("Mul", ["a", "a"], ["sq"]),
               helper.make_node("Greater", ["sq", "a"], ["gt"])],
              [tensor("a", 7, [6])], [tensor("sq", 7, [6]), tensor("gt", 9, [6])]),
        [np.arange(-3, 3, dtype=np.int64)]),
    "two inputs, split into three": (
        model([helper.make_node("Concat", ["a", "b"], ["c"], axis=0),
               helper.make_node("Split", ["c"], ["p", "q", "r"], axis=0, num_outputs=3)],
              [tensor("a", 11, [2, 3]), tensor("b", 11, [4, 3])],
              [tensor("p", 11, [2, 3]), tensor("q", 11, [2, 3]), tensor("r", 11, [2, 3])]),
        [rng.standard_normal((2, 3)), rng.standard_normal((4, 3))]),
}


def run_capi(data: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    session = OrtSession(data)
    api = session.api
    values = [api.tensor(x.ctypes.data, x.nbytes, x.shape, session.inputs[i][1])
              for i, x in enumerate(inputs)]
    outputs = OrtSession.values([None] * len(session.outputs))
    try:
        session.run(OrtSession.values(values), outputs)
        results = []
        for value in outputs:
            shape, element = api.shape_of(value)
            dtype = np.dtype(_NP[element])
            size = int(np.prod(shape)) * dtype.itemsize
            raw = ctypes.string_at(api.data_of(value), size)
            results.append(np.frombuffer(raw, dtype=dtype).reshape(shape))
        return results
    finally:
        for value in [*values, *outputs]:
            if value:
                api.ReleaseValue(value)
        session.close()


@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_match_the_python_api_exactly(name):
    data, inputs = MODELS[name]
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = reference.run(None, {i.name: x for i, x in zip(reference.get_inputs(), inputs)})
    got = run_capi(data, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)


def test_session_describes_inputs_and_outputs():
    session = OrtSession(MODELS["relu, dynamic batch"][0])
    assert session.inputs == [("x", 1, (-1, 5))] and session.outputs == [("y", 1, (-1, 5))]


def test_errors_carry_onnxruntimes_message():
    with pytest.raises(OrtError, match="CreateSessionFromArray failed: .*protobuf"):
        OrtSession(b"not an onnx model")
    session = OrtSession(MODELS["matmul + bias (initializers)"][0])
    x = np.zeros((5, 8), np.float32)  # wrong batch for a fixed [4, 8] input
    value = session.api.tensor(x.ctypes.data, x.nbytes, x.shape, 1)
    try:
        with pytest.raises(OrtError, match="Run failed: .*"):
            session.run(OrtSession.values([value]), OrtSession.values([None]))
    finally:
        session.api.ReleaseValue(value)
