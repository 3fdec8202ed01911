"""torch's side of the one dtype table: dtypes.py's rows as torch dtypes.

dtypes.py stays torch-free (the runtime imports it), so the export side maps
its rows to `torch.<row.torch>` here and nowhere else. Every mapping below is
derived from those rows, over EXPORT_DTYPES: the dtypes our export writes
into a blob (a delegate's inputs and outputs, weights, state buffers).
"""
from __future__ import annotations

import torch

from ..dtypes import EXPORT_DTYPES, DType


def torch_dtype(row: DType) -> torch.dtype | None:
    """`torch.<row.torch>`, None where this torch lacks it."""
    return getattr(torch, row.torch, None)


#: torch dtype -> the blob's dtype name
BLOB_NAME_OF_TORCH: dict[torch.dtype, str] = {torch_dtype(d): d.blob_name for d in EXPORT_DTYPES}
#: ONNX TensorProto code -> the blob's dtype name
BLOB_NAME_OF_ONNX: dict[int, str] = {d.onnx: d.blob_name for d in EXPORT_DTYPES}
#: ONNX TensorProto code -> torch dtype
TORCH_OF_ONNX: dict[int, torch.dtype] = {d.onnx: torch_dtype(d) for d in EXPORT_DTYPES}
#: TensorRT DataType member name -> torch dtype
TORCH_OF_TENSORRT: dict[str, torch.dtype] = {
    d.tensorrt: torch_dtype(d) for d in EXPORT_DTYPES if d.tensorrt}
