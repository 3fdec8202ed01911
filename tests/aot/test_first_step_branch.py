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


def test_first_step_writes_become_an_in_place_scatter_of_an_empty_update_later():
    """decoder_fusions.branch_kept_writes: KeepFirst(cache, projection, first)
    becomes If(first) -> the projection, or an empty update, written by
    TensorScatter at position 0: the projection runs at position 0 only, a
    later call leaves the cache as it was, and TensorRT-RTX builds it."""
    from executorch_tensorrt.aot.state.kept_write import KEEP_OP
    from executorch_tensorrt.aot.onnx.state_markers import MARKER_DOMAIN
    from executorch_tensorrt.aot.state.kv_update import rewrite_tensor_scatter
    from executorch_tensorrt.aot.state.lifted import LiftedProgram

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(
        np.float32), "w")
    to_heads = numpy_helper.from_array(np.array([1, 1, 5, 3], np.int64), "to_heads")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero_i")
    nodes = [helper.make_node("Gather", ["position", "zero_i"], ["p0"], axis=0),
             helper.make_node("Equal", ["p0", "zero_i"], ["first"]),
             helper.make_node("MatMul", ["hidden", "w"], ["k"]),
             helper.make_node("Reshape", ["k", "to_heads"], ["fresh"]),
             helper.make_node(KEEP_OP, ["cache", "fresh", "first"], ["kept"],
                              domain=MARKER_DOMAIN, axis=2),
             helper.make_node("ReduceSum", ["kept"], ["y"], keepdims=0)]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [value("position", TensorProto.INT64, [1]),
                                           value("hidden", F, [5, 4]),
                                           value("cache", F, [1, 1, 5, 3])],
                              [value("y", F, []), value("kept", F, [1, 1, 5, 3])],
                              [w, to_heads, zero])
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24),
                                                       helper.make_opsetid(MARKER_DOMAIN, 1)])
    model = ir.serde.deserialize_model(original)
    assert fuse(model)["first-step writes in place"] == 1
    written = ir.serde.serialize_model(model)
    rewrite_tensor_scatter(written, LiftedProgram(None), [], {})
    (branch,) = [n for n in written.graph.node if n.op_type == "If"]
    then, other = (next(a.g for a in branch.attribute if a.name == key)
                   for key in ("then_branch", "else_branch"))
    assert "MatMul" in {n.op_type for n in then.node}
    assert {n.op_type for n in other.node} == {"Identity"}
    assert [n.op_type for n in written.graph.node if n.op_type in ("TensorScatter", "MatMul")] \
        == ["TensorScatter"]
    rng = np.random.default_rng(7)
    hidden = rng.standard_normal((5, 4)).astype(np.float32)
    cache = np.zeros((1, 1, 5, 3), np.float32)
    y, kept = _run(written, {"position": np.array([0], np.int64), "hidden": hidden,
                             "cache": cache})
    np.testing.assert_allclose(kept, (hidden @ numpy_helper.to_array(w)).reshape(1, 1, 5, 3),
                               rtol=1e-6)
    later = _run(written, {"position": np.array([3], np.int64), "hidden": hidden * 0 + 1,
                           "cache": kept})
    np.testing.assert_array_equal(later[1], kept)
    assert later[0] == y
    _build(written, "first-step writes")
    # TensorRT's parser makes the write its KV-cache-update layer, whose output
    # aliases the cache input: the engine updates the state in place.
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    from executorch_tensorrt.tensorrt.onnx_parser import parse_network

    _, network, _, _ = parse_network(load_tensorrt(), written.SerializeToString())
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    assert [str(layer.type) for layer in layers if layer.get_output(0) is not None
            and layer.get_output(0).name == "kept"] == ["LayerType.KV_CACHE_UPDATE"]
