"""decoder_fusions.branch_first_step: Where(one-element c, projection,
stored) becomes If(c) whose then-branch alone computes the projection; it
gives the Where's values for both c, onnxruntime runs it, and TensorRT-RTX
parses and builds it."""
from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from executorch_tensorrt.aot.onnx.fusions import fuse
from test_onnx_fusions import _build, _graph_model, _run

F = TensorProto.FLOAT


def _kept_projections(*, shared: bool = False):
    """Two states picked on `first = position[0] == 0`: each a projection of
    `hidden` then, its stored value otherwise (`shared`: the first
    projection is also read outside the Where)."""
    w = [numpy_helper.from_array(np.random.default_rng(i).standard_normal((4, 3)).astype(
        np.float32), f"w{i}") for i in range(2)]
    nodes = [helper.make_node("Gather", ["position", "zero_i"], ["p0"], axis=0),
             helper.make_node("Equal", ["p0", "zero_i"], ["first"]),
             helper.make_node("MatMul", ["hidden", "w0"], ["k"]),
             helper.make_node("Relu", ["k"], ["k_act"]),
             helper.make_node("MatMul", ["hidden", "w1"], ["v"]),
             helper.make_node("Where", ["first", "k_act", "stored_k"], ["kept_k"]),
             helper.make_node("Where", ["first", "v", "stored_v"], ["kept_v"]),
             helper.make_node("Add", ["kept_k", "kept_v"], ["y"])]
    outputs = [("y", F, [5, 3]), ("kept_k", F, [5, 3]), ("kept_v", F, [5, 3])]
    if shared:
        outputs.append(("k", F, [5, 3]))
    inputs = [("position", TensorProto.INT64, [1]), ("hidden", F, [5, 4]),
              ("stored_k", F, [5, 3]), ("stored_v", F, [5, 3])]
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero_i")
    return _graph_model(nodes, inputs, outputs, [*w, zero])


def test_the_projections_move_into_one_if_that_gives_the_wheres_values():
    original = _kept_projections()
    model = ir.serde.deserialize_model(original)
    assert fuse(model)["first step branched"] == 1
    branched = ir.serde.serialize_model(model)
    (node,) = [n for n in branched.graph.node if n.op_type == "If"]
    then = next(a.g for a in node.attribute if a.name == "then_branch")
    assert sorted(n.op_type for n in then.node) == ["MatMul", "MatMul", "Relu"]
    assert not any(n.op_type == "MatMul" for n in branched.graph.node)
    rng = np.random.default_rng(7)
    feeds = {"hidden": rng.standard_normal((5, 4)).astype(np.float32),
             "stored_k": rng.standard_normal((5, 3)).astype(np.float32),
             "stored_v": rng.standard_normal((5, 3)).astype(np.float32)}
    for position in (0, 3):
        feeds["position"] = np.array([position], np.int64)
        for got, want in zip(_run(branched, feeds), _run(original, feeds)):
            np.testing.assert_array_equal(got, want)
    _build(branched, "first-step If")


def test_a_projection_read_elsewhere_stays_computed_every_call():
    model = ir.serde.deserialize_model(_kept_projections(shared=True))
    fuse(model)
    # The first projection is a graph output: it stays, what only the Where reads moves.
    (node,) = [n for n in model.graph if n.op_type == "If"]
    assert sorted(n.op_type for n in node.attributes["then_branch"].value) == ["MatMul", "Relu"]
    assert [n.op_type for n in model.graph if n.op_type in ("MatMul", "Where")] == ["MatMul"]
