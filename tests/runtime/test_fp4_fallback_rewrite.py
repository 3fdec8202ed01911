"""runtime/onnxruntime/fp4.py on hand-made ONNX models: the FLOAT4E2M1 block
DequantizeLinear that onnxruntime cannot run becomes float16 values and a Mul
that it runs (real onnxruntime), equal to NVFP4's definition; forms it does not
take and inline bytes of the wrong size are refused by name."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from executorch_tensorrt.errors import InvalidProgramError
from executorch_tensorrt.runtime.onnxruntime.fp4 import E2M1_FLOAT16, fp4_as_float16

OUT, IN, BLOCK = 4, 32, 16
RNG = np.random.default_rng(0)
CODES = RNG.integers(0, 16, size=(OUT, IN), dtype=np.uint8)
BLOCK_SCALES = RNG.integers(0x20, 0x60, size=(OUT, IN // BLOCK), dtype=np.uint8)  # fp8 bits
GLOBAL = np.float32(0.0123)


def _fp8_values(bits: np.ndarray) -> np.ndarray:
    t = helper.make_tensor("s", TensorProto.FLOAT8E4M3FN, list(bits.shape), bits.tobytes(),
                           raw=True)
    return numpy_helper.to_array(t).astype(np.float32)


def _model(packed: bytes, axis: int = 1, block: int = BLOCK,
           consumer: onnx.NodeProto | None = None) -> bytes:
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT4E2M1, dims=[OUT, IN],
                         raw_data=packed)  # any size: a crafted blob's
    bs = helper.make_tensor("bs", TensorProto.FLOAT8E4M3FN, [OUT, IN // BLOCK],
                            BLOCK_SCALES.tobytes(), raw=True)
    zero = helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], b"\x00", raw=True)
    gs = numpy_helper.from_array(np.array(GLOBAL), "gs")
    nodes = [helper.make_node("DequantizeLinear", ["bs", "gs", "z"], ["scales"]),
             helper.make_node("DequantizeLinear", ["w", "scales"], ["weight"], axis=axis,
                              block_size=block),
             helper.make_node("MatMul", ["x", "weight_t"], ["y"]),
             helper.make_node("Transpose", ["weight"], ["weight_t"])]
    if consumer is not None:
        nodes.append(consumer)
    graph = helper.make_graph(
        [nodes[0], nodes[1], nodes[3], nodes[2], *nodes[4:]], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, OUT])],
        initializer=[w, bs, zero, gs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                             ir_version=11).SerializeToString()


def _packed(codes: np.ndarray) -> bytes:
    flat = codes.reshape(-1)
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


def test_the_rewritten_block_dequantize_runs_in_onnxruntime_and_equals_nvfp4():
    model = _model(_packed(CODES))
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|Could not find an implementation"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])  # why the rewrite exists
    rewritten = fp4_as_float16(model)
    graph = onnx.load_from_string(rewritten).graph
    assert TensorProto.FLOAT4E2M1 not in {t.data_type for t in graph.initializer}
    # No DequantizeLinear left: the chain is constant, so onnxruntime can fold it.
    assert "DequantizeLinear" not in {n.op_type for n in graph.node}
    x = RNG.standard_normal((2, IN)).astype(np.float32)
    (y,) = ort.InferenceSession(rewritten, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    scales = np.repeat(_fp8_values(BLOCK_SCALES) * GLOBAL, BLOCK, axis=1)  # float32 products
    weight = E2M1_FLOAT16[CODES].astype(np.float32) * scales
    np.testing.assert_allclose(y, x @ weight.T, rtol=1e-6, atol=1e-6)


def test_a_model_without_fp4_is_returned_unchanged():
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph).SerializeToString()
    assert fp4_as_float16(model) is model


@pytest.mark.parametrize("make, match", [
    (lambda: _model(_packed(CODES)[:-1]), r"holds 63 bytes, expected 64"),
    (lambda: _model(_packed(CODES), axis=0), "axis 0"),
    (lambda: _model(_packed(CODES), block=12), "block_size 12"),
    (lambda: _model(_packed(CODES), consumer=helper.make_node("Identity", ["w"], ["o"])),
     "is read by Identity"),
    (lambda: _model(_packed(CODES), consumer=helper.make_node("Add", ["gs", "w"], ["o"])),
     "other than as a DequantizeLinear's input"),
])
def test_forms_the_fallback_cannot_run_are_refused(make, match):
    with pytest.raises(InvalidProgramError, match=match):
        fp4_as_float16(make())
