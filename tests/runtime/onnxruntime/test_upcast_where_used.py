"""Cast where used (runtime/onnxruntime/where_used.py): bf16 weights read
through a Cast on every call. A table only gathered from (a token embedding)
is gathered in bf16 and only its rows are cast; any other weight is cast
whole before its first use, or in column blocks when big; each read waits
for the value computed before it. Each weight becomes a model input with no
initializer, fed on every run. Checked on the rewritten model onnxruntime
runs."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from executorch_tensorrt.runtime.onnxruntime.upcast import upcast_to_fp32

VOCAB, DIM, OUT = 50, 8, 4


def _bf16(name: str, values: np.ndarray) -> onnx.TensorProto:
    """values must be exact in bf16: their top 16 bits are the bf16 bytes."""
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return helper.make_tensor(name, TensorProto.BFLOAT16, values.shape, bits.tobytes(), raw=True)


def _model(table: np.ndarray, weight: np.ndarray) -> bytes:
    nodes = [helper.make_node("Gather", ["E", "ids"], ["h"]),
             helper.make_node("MatMul", ["h", "W"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3, OUT])],
        [_bf16("E", table), _bf16("W", weight)],
        value_info=[helper.make_tensor_value_info("h", TensorProto.BFLOAT16, [3, DIM])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_gathered_table_is_cast_by_rows_and_other_weights_whole():
    rng = np.random.default_rng(0)
    table = rng.integers(-8, 8, (VOCAB, DIM)).astype(np.float32) / 4
    weight = rng.integers(-8, 8, (DIM, OUT)).astype(np.float32) / 4
    rewritten = onnx.load_model_from_string(upcast_to_fp32(_model(table, weight),
                                                           where_used=frozenset({"E", "W"})))
    nodes = list(rewritten.graph.node)
    users = {name: [n.op_type for n in nodes if name in n.input] for name in ("E", "W")}
    assert users == {"E": ["Gather"], "W": ["Reshape"]}  # the table is never cast whole
    gate = next(n for n in nodes if n.op_type == "Reshape")  # W read once "h" exists
    assert [n.op_type for n in nodes if gate.output[0] in n.input] == ["Cast"]
    assert next(n for n in nodes if n.op_type == "ReduceMin").input[0] == "h"
    gather = next(n for n in nodes if n.op_type == "Gather")
    assert [n.op_type for n in nodes if gather.output[0] in n.input] == ["Cast"]
    # Inputs fed on every run (OrtSession.run), no initializers: never folded or copied.
    assert [i.name for i in rewritten.graph.input] == ["ids", "E", "W"]
    assert not {"E", "W"} & {t.name for t in rewritten.graph.initializer}

    session = ort.InferenceSession(rewritten.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    ids = np.array([3, 0, 49], dtype=np.int64)
    fed = {name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        (values.view(np.uint32) >> 16).astype(np.uint16), TensorProto.BFLOAT16)
        for name, values in (("E", table), ("W", weight))}
    (y,) = session.run(None, {"ids": ids, **fed})
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, table[ids] @ weight)  # exact: small multiples of 1/4


def test_a_big_matmul_weight_is_cast_and_multiplied_in_column_blocks(monkeypatch):
    """Over CAST_BLOCK_BYTES of fp32 a MatMul weight is cast one column block
    at a time (an 8B-shaped head: 17 blocks instead of one 2.1 GB cast)."""
    from executorch_tensorrt.runtime.onnxruntime import where_used

    cols = 10
    monkeypatch.setattr(where_used, "CAST_BLOCK_BYTES", DIM * 4 * 3)  # 3 columns a block
    rng = np.random.default_rng(1)
    weight = rng.integers(-8, 8, (DIM, cols)).astype(np.float32) / 4
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, DIM])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, cols])],
        [_bf16("W", weight)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rewritten = onnx.load_model_from_string(upcast_to_fp32(model.SerializeToString(),
                                                           where_used=frozenset({"W"})))
    nodes = list(rewritten.graph.node)
    block, gate = ["Slice", "Cast", "MatMul"], ["ReduceMin", "IsNaN", "Cast", "Mul", "Add",
                                                 "Reshape"]
    # 3 + 3 + 3 + 1 columns; the first block reads "x", a model input: no gate.
    assert [n.op_type for n in nodes] == block + (gate + block) * 3 + ["Concat"]
    assert [n.op_type for n in nodes if "W" in n.input] == ["Slice"] + ["Reshape"] * 3
    # Block j's slice waits for block j-1's product.
    waits = [n.input[0] for n in nodes if n.op_type == "ReduceMin"]
    products = [n.output[0] for n in nodes if n.op_type == "MatMul"]
    assert waits == products[:-1]
    session = ort.InferenceSession(rewritten.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    x = rng.integers(-8, 8, (2, 3, DIM)).astype(np.float32) / 4
    w = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        (weight.view(np.uint32) >> 16).astype(np.uint16), TensorProto.BFLOAT16)
    (y,) = session.run(None, {"x": x, "W": w})
    np.testing.assert_array_equal(y, x @ weight)


def test_a_gate_never_waits_for_another_weight_cast_where_used():
    """Add(W1, W2): neither weight's read waits for the other (raw bf16, or its
    whole cast): a gate reads computed activations only."""
    rng = np.random.default_rng(2)
    w1, w2 = (rng.integers(-8, 8, (DIM,)).astype(np.float32) / 4 for _ in range(2))
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("Add", ["W1", "W2"], ["a"]),
             helper.make_node("Mul", ["h", "a"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, DIM])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, DIM])],
        [_bf16("W1", w1), _bf16("W2", w2)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rewritten = onnx.load_model_from_string(upcast_to_fp32(model.SerializeToString(),
                                                           where_used=frozenset({"W1", "W2"})))
    waits = {n.input[0] for n in rewritten.graph.node if n.op_type == "ReduceMin"}
    assert not waits & {"W1", "W2", "W1__fp32", "W2__fp32"}
    session = ort.InferenceSession(rewritten.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    x = rng.integers(-8, 8, (3, DIM)).astype(np.float32) / 4
    fed = {name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        (values.view(np.uint32) >> 16).astype(np.uint16), TensorProto.BFLOAT16)
        for name, values in (("W1", w1), ("W2", w2))}
    (y,) = session.run(None, {"x": x, **fed})
    np.testing.assert_array_equal(y, np.maximum(x, 0) * (w1 + w2))
