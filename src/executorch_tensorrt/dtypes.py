"""The one dtype table: each dtype named once, with every code the project maps it to.

Torch-free (the runtime never imports torch). Each row gives the ExecuTorch
ScalarType code, the numpy dtype name, the ONNX TensorProto code, the
onnxruntime element type, the name the blob's metadata records, the
TensorRT DataType member name and torch's dtype name (a string: the AOT
side maps it to `torch.<name>`, aot/torch_dtypes.py). Every other dtype
table of the package is derived from these rows (tests/test_dtypes.py). TensorRT itself is looked up lazily
(`tensorrt_dtype`), for either `tensorrt` or `tensorrt_rtx`, so importing
this module loads neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DType", "DTYPES", "E2M1_VALUES", "EXPORT_DTYPES", "by_blob_name", "by_scalar_type",
           "by_onnx", "tensorrt_dtype"]


@dataclass(frozen=True)
class DType:
    blob_name: str | None  # the io_bindings / weights / state "dtype" string; None: not in blobs
    scalar_type: int  # ExecuTorch (c10) ScalarType code
    numpy: str | None  # numpy dtype name ("bfloat16", "float8_e4m3fn" come from ml_dtypes)
    onnx: int | None  # onnx.TensorProto.DataType code
    onnxruntime: int | None  # ONNXTensorElementDataType (the C API's enum)
    tensorrt: str | None  # tensorrt.DataType member name
    itemsize: int
    torch: str  # torch.<name>: the dtype torch gives this ScalarType


DTYPES: tuple[DType, ...] = (
    DType("uint8", 0, "uint8", 2, 2, "UINT8", 1, "uint8"),
    DType("int8", 1, "int8", 3, 3, "INT8", 1, "int8"),
    DType(None, 2, "int16", 5, 5, None, 2, "int16"),
    DType("int32", 3, "int32", 6, 6, "INT32", 4, "int32"),
    DType("int64", 4, "int64", 7, 7, "INT64", 8, "int64"),
    DType("float16", 5, "float16", 10, 10, "HALF", 2, "float16"),
    DType("float32", 6, "float32", 1, 1, "FLOAT", 4, "float32"),
    DType(None, 7, "float64", 11, 11, None, 8, "float64"),
    DType("bool", 11, "bool", 9, 9, "BOOL", 1, "bool"),
    DType("bfloat16", 15, "bfloat16", 16, 16, "BF16", 2, "bfloat16"),
    DType(None, 23, None, 19, 19, None, 1, "float8_e5m2"),  # read from older blobs only
    DType("float8", 24, "float8_e4m3fn", 17, 17, "FP8", 1, "float8_e4m3fn"),  # TensorRT's FP8
)

#: What our export writes into blobs (a delegate's inputs and outputs, weights,
#: state buffers): every blob dtype but "float8", which only blobs written by
#: Torch-TensorRT and fp8 KV caches (aot/state/fp8_cache.py) carry.
EXPORT_DTYPES: tuple[DType, ...] = tuple(
    d for d in DTYPES if d.blob_name and d.blob_name != "float8")

#: FP4 E2M1 (ONNX FLOAT4E2M1, no row: ExecuTorch has no ScalarType for it):
#: the value of each 4-bit code (sign, 2 exponent bits, 1 mantissa bit).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

_BY_BLOB = {d.blob_name: d for d in DTYPES if d.blob_name}
_BY_CODE = {d.scalar_type: d for d in DTYPES}
_BY_ONNX = {d.onnx: d for d in DTYPES if d.onnx is not None}


def by_blob_name(name: str) -> DType | None:
    """The row for a blob dtype string ("float32", or "torch.float32" as an
    earlier Torch-TensorRT helper wrote it); None when unknown or ""."""
    return _BY_BLOB.get(name.removeprefix("torch.")) if name else None


def by_scalar_type(code: int) -> DType | None:
    return _BY_CODE.get(code)


def by_onnx(code: int) -> DType | None:
    return _BY_ONNX.get(code)


def tensorrt_dtype(module: Any, dtype: DType) -> Any | None:
    """The `module.DataType` member (module: tensorrt or tensorrt_rtx), None
    where that TensorRT lacks it (BF16/INT64 are missing from older ones)."""
    return getattr(module.DataType, dtype.tensorrt, None) if dtype.tensorrt else None
