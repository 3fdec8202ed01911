"""Which dynamic outputs the onnxruntime executor binds after a first call
(runtime/onnxruntime/output_shapes.py): those whose shape the input shapes fix,
and from which input dimension each of their dimensions takes its size."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from executorch_tensorrt.runtime.onnxruntime.output_shapes import output_dim_sources


def _model(outputs, nodes) -> bytes:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s0", 4])],
        outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_an_output_of_input_symbols_and_numbers_follows_the_input_shapes():
    model = _model([helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s0", 4])],
                   [helper.make_node("Relu", ["x"], ["y"])])
    assert output_dim_sources(model, 1) == ((1, (0, 1), 4),)


def test_a_symbol_takes_the_first_input_dimension_that_carries_it():
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "p"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s0"]),
         helper.make_tensor_value_info("p", TensorProto.FLOAT, ["s0"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["s0", 1, "s0"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert output_dim_sources(model.SerializeToString(), 1) == (((0, 1), 1, (0, 1)),)


def test_a_value_dependent_or_unknown_dimension_does_not():
    """NonZero's count (a symbol no input has) and a dimension with neither a
    value nor a name depend on the values: those outputs stay allocated."""
    model = _model([helper.make_tensor_value_info("n", TensorProto.INT64, [3, "u0"]),
                    helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, 4]),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, "s0", 4])],
                   [helper.make_node("NonZero", ["x"], ["n"]),
                    helper.make_node("Relu", ["x"], ["y"]),
                    helper.make_node("Relu", ["x"], ["z"])])
    assert output_dim_sources(model, 3) == (None, None, (1, (0, 1), 4))
    assert output_dim_sources(model, 1) == (None,)  # the user outputs come first


def test_an_output_without_a_shape_does_not():
    out = onnx.ValueInfoProto(name="y")
    out.type.tensor_type.elem_type = TensorProto.FLOAT
    model = _model([out], [helper.make_node("Relu", ["x"], ["y"])])
    assert output_dim_sources(model, 1) == (None,)
