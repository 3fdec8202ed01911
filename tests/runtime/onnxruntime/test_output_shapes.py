"""Which dynamic outputs the onnxruntime executor binds after a first call
(runtime/onnxruntime/output_shapes.py): those whose shape the input shapes fix."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from executorch_tensorrt.runtime.onnxruntime.output_shapes import outputs_follow_input_shapes


def _model(outputs, nodes) -> bytes:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s0", 4])],
        outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_an_output_of_input_symbols_and_numbers_follows_the_input_shapes():
    model = _model([helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s0", 4])],
                   [helper.make_node("Relu", ["x"], ["y"])])
    assert outputs_follow_input_shapes(model, 1) == (True,)


def test_a_value_dependent_or_unknown_dimension_does_not():
    """NonZero's count (a symbol no input has) and a dimension with neither a
    value nor a name depend on the values: those outputs stay allocated."""
    model = _model([helper.make_tensor_value_info("n", TensorProto.INT64, [3, "u0"]),
                    helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, 4]),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, "s0", 4])],
                   [helper.make_node("NonZero", ["x"], ["n"]),
                    helper.make_node("Relu", ["x"], ["y"]),
                    helper.make_node("Relu", ["x"], ["z"])])
    assert outputs_follow_input_shapes(model, 3) == (False, False, True)
    assert outputs_follow_input_shapes(model, 1) == (False,)  # the user outputs come first


def test_an_output_without_a_shape_does_not():
    out = onnx.ValueInfoProto(name="y")
    out.type.tensor_type.elem_type = TensorProto.FLOAT
    model = _model([out], [helper.make_node("Relu", ["x"], ["y"])])
    assert outputs_follow_input_shapes(model, 1) == (False,)
