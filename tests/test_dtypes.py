"""The one dtype table (executorch_tensorrt.dtypes) checked row by row against
the real libraries, so a wrong code in any column fails here."""
import ml_dtypes
import numpy as np
import onnx
import pytest

from executorch_tensorrt import dtypes
from executorch_tensorrt.blob.format import DTYPE_ITEMSIZE, DTYPE_TO_SCALAR_TYPE
from executorch_tensorrt.runtime.arguments import BLOB_DTYPE_TO_NUMPY, SCALAR_TYPE_TO_NUMPY

# c10 ScalarType names by code, as torch numbers them.
_TORCH = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
          7: "float64", 11: "bool", 15: "bfloat16", 23: "float8_e5m2", 24: "float8_e4m3fn"}
_ONNX = {"float8": "FLOAT8E4M3FN", "float8_e4m3fn": "FLOAT8E4M3FN", "bool": "BOOL", "float16": "FLOAT16", "float64": "DOUBLE",
         "float32": "FLOAT", "float8_e5m2": "FLOAT8E5M2"}
_SCHEMA = {"uint8": "BYTE", "int8": "CHAR", "int16": "SHORT", "int32": "INT", "int64": "LONG",
           "float16": "HALF", "float32": "FLOAT", "float64": "DOUBLE", "bool": "BOOL",
           "bfloat16": "BFLOAT16", "float8": "FLOAT8E4M3FN", "float8_e4m3fn": "FLOAT8E4M3FN",
           "float8_e5m2": "FLOAT8E5M2"}


def _key(row):
    return row.numpy or row.blob_name or row.torch


@pytest.mark.parametrize("row", dtypes.DTYPES, ids=_key)
def test_row_matches_libraries(row):
    name = _key(row)
    if row.numpy:
        np_dtype = np.dtype(getattr(ml_dtypes, row.numpy, None) or row.numpy)
        assert np_dtype.itemsize == row.itemsize
    onnx_name = _ONNX.get(name, name.upper())
    assert row.onnx == getattr(onnx.TensorProto, onnx_name)
    # onnxruntime's C API enum follows TensorProto's codes.
    assert row.onnxruntime == row.onnx
    import torch
    assert getattr(torch, _TORCH[row.scalar_type]).itemsize == row.itemsize
    assert row.torch == _TORCH[row.scalar_type]
    # the ScalarType code: executorch's schema enum names it.
    from executorch.exir.scalar_type import ScalarType
    assert ScalarType(row.scalar_type).name == _SCHEMA[name]

@pytest.mark.parametrize("row", [d for d in dtypes.DTYPES if d.tensorrt], ids=lambda d: d.tensorrt)
def test_tensorrt_member(row):
    trt = pytest.importorskip("tensorrt_rtx")
    member = dtypes.tensorrt_dtype(trt, row)
    assert member is not None
    assert member.itemsize == row.itemsize


def test_views_are_the_table():
    assert SCALAR_TYPE_TO_NUMPY[15] == np.dtype(ml_dtypes.bfloat16)
    assert SCALAR_TYPE_TO_NUMPY[24] == np.dtype(ml_dtypes.float8_e4m3fn)  # fp8 KV caches
    assert set(BLOB_DTYPE_TO_NUMPY) == set(DTYPE_TO_SCALAR_TYPE)
    for name, code in DTYPE_TO_SCALAR_TYPE.items():
        row = dtypes.by_blob_name(name)
        assert row.scalar_type == code and row.itemsize == DTYPE_ITEMSIZE[name]


_ORT_MODEL_DTYPES = [d for d in dtypes.DTYPES if d.numpy]  # onnxruntime's CPU Identity takes these


@pytest.mark.parametrize("row", _ORT_MODEL_DTYPES, ids=_key)
def test_onnxruntime_c_api_reports_the_rows_element_type(row):
    """onnxruntime's own C API names an Identity model's input type: the row's code."""
    from onnx import helper

    from executorch_tensorrt.runtime.onnxruntime.capi import ELEMENT_TYPE_NAMES, OrtSession

    x = helper.make_tensor_value_info("x", row.onnx, [2])
    y = helper.make_tensor_value_info("y", row.onnx, [2])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    # Opset 21: Identity takes float8 from 19 on.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    session = OrtSession(model.SerializeToString())
    (_, element, _), = session.inputs
    assert element == row.onnxruntime
    assert ELEMENT_TYPE_NAMES[element] == row.numpy


def test_every_dtype_table_is_a_view_of_the_rows():
    """Each table the package keeps elsewhere, against the libraries' own codes."""
    import torch

    from executorch_tensorrt.aot import torch_dtypes
    from executorch_tensorrt.blob.format import READ_DTYPES, WRITE_DTYPES
    from executorch_tensorrt.program.info import scalar_type_name
    from executorch_tensorrt.program.tensor_file import DTYPES as TENSOR_FILE_DTYPES
    from executorch_tensorrt.runtime.onnx_safety import ONNX_DTYPES
    from executorch_tensorrt.runtime.onnxruntime.bound_values import ORT_ELEMENT_TYPES

    blob_rows = [d for d in dtypes.DTYPES if d.blob_name]
    assert WRITE_DTYPES == {d.blob_name for d in blob_rows} | {""}
    assert READ_DTYPES == WRITE_DTYPES | {str(getattr(torch, d.torch)) for d in dtypes.DTYPES}
    for d in blob_rows:
        assert ONNX_DTYPES[d.blob_name] == getattr(onnx.TensorProto, _ONNX.get(d.blob_name, d.blob_name.upper()))
    # besides the rows: the packed weight dtypes (int4, fp4), which ExecuTorch has no ScalarType for
    from executorch_tensorrt.blob.format import PACKED_WEIGHT_DTYPES
    assert PACKED_WEIGHT_DTYPES == {"int4": onnx.TensorProto.INT4,
                                    "float4_e2m1": onnx.TensorProto.FLOAT4E2M1}
    assert len(ONNX_DTYPES) == len(blob_rows) + len(PACKED_WEIGHT_DTYPES)
    assert all(ONNX_DTYPES[name] == code for name, code in PACKED_WEIGHT_DTYPES.items())
    for d in dtypes.DTYPES:
        if d.numpy:
            np_dtype = np.dtype(getattr(ml_dtypes, d.numpy, None) or d.numpy)
            assert ORT_ELEMENT_TYPES[np_dtype] == d.onnx
            assert scalar_type_name(d.scalar_type) == d.numpy
            name, storage = TENSOR_FILE_DTYPES[d.scalar_type]
            assert name == d.numpy and storage.itemsize == d.itemsize
    exported = [d for d in blob_rows if d.blob_name != "float8"]
    assert {torch_dtypes.torch_dtype(d) for d in exported} == {
        torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
        torch.int64, torch.bool}
    for d in exported:
        t = torch_dtypes.torch_dtype(d)
        assert torch_dtypes.BLOB_NAME_OF_TORCH[t] == d.blob_name
        assert torch_dtypes.TORCH_OF_ONNX[d.onnx] == t
        assert onnx.helper.tensor_dtype_to_np_dtype(d.onnx).itemsize == t.itemsize
        assert torch_dtypes.TORCH_OF_TENSORRT[d.tensorrt] == t


def test_e2m1_values_are_onnx_float4e2m1_codes():
    """dtypes.E2M1_VALUES (fp4: quantization and the fallback) is what onnx
    itself reads for each of the 16 FLOAT4E2M1 codes, signed zero included."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from executorch_tensorrt.dtypes import E2M1_VALUES

    codes = bytes(lo | (hi << 4) for lo, hi in zip(range(0, 16, 2), range(1, 16, 2)))
    tensor = onnx.helper.make_tensor("c", onnx.TensorProto.FLOAT4E2M1, [16], codes, raw=True)
    values = numpy_helper.to_array(tensor).astype(np.float32)
    assert values.tolist() == list(E2M1_VALUES)
    assert np.signbit(values).tolist() == [v < 0 or str(v) == "-0.0" for v in E2M1_VALUES]
