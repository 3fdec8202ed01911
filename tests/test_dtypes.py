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
          7: "float64", 11: "bool", 15: "bfloat16", 24: "float8_e4m3fn"}
_ONNX = {"float8": "FLOAT8E4M3FN", "bool": "BOOL", "float16": "FLOAT16", "float64": "DOUBLE",
         "float32": "FLOAT"}
_SCHEMA = {"uint8": "BYTE", "int8": "CHAR", "int16": "SHORT", "int32": "INT", "int64": "LONG",
           "float16": "HALF", "float32": "FLOAT", "float64": "DOUBLE", "bool": "BOOL",
           "bfloat16": "BFLOAT16", "float8": "FLOAT8E4M3FN"}


@pytest.mark.parametrize("row", dtypes.DTYPES, ids=lambda d: d.numpy or d.blob_name)
def test_row_matches_libraries(row):
    name = row.numpy or row.blob_name
    if row.numpy:
        np_dtype = np.dtype(ml_dtypes.bfloat16 if row.numpy == "bfloat16" else row.numpy)
        assert np_dtype.itemsize == row.itemsize
    onnx_name = _ONNX.get(name, name.upper())
    assert row.onnx == getattr(onnx.TensorProto, onnx_name)
    # onnxruntime's C API enum follows TensorProto's codes.
    assert row.onnxruntime == row.onnx
    import torch
    assert getattr(torch, _TORCH[row.scalar_type]).itemsize == row.itemsize
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
    assert set(BLOB_DTYPE_TO_NUMPY) == set(DTYPE_TO_SCALAR_TYPE) - {"float8"}
    for name, code in DTYPE_TO_SCALAR_TYPE.items():
        row = dtypes.by_blob_name(name)
        assert row.scalar_type == code and row.itemsize == DTYPE_ITEMSIZE[name]
