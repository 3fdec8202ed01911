"""Blobs laid out as ExecuTorch's upstream delegate and Torch-TensorRT write
them (behaviour restated from their sources, see docs/blob-format.md)."""

from __future__ import annotations

import json
import struct


def executorch_style_blob(bindings: list[dict]) -> bytes:
    # As ExecuTorch's serialize_blob lays it out: reserved all zero, default
    # json.dumps (ASCII escapes), each binding with is_shape_tensor.
    text = json.dumps({"io_bindings": bindings}, separators=(",", ":")).encode()
    eo = (32 + len(text) + 15) // 16 * 16
    engine = b"engine!" * 3
    return (struct.pack("<4sIIIQ8s", b"TR01", 32, len(text), eo, len(engine), b"\0" * 8)
            + text + b"\0" * (eo - 32 - len(text)) + engine)


def torch_tensorrt_style_blob() -> bytes:
    # As Torch-TensorRT's serialize_engine lays it out: dtype "" and shape []
    # when unknown, aliased_io [], then the scalar fields; reserved[0] = 1.
    meta = {"io_bindings": [{"name": "x", "dtype": "", "shape": [], "is_input": True},
                            {"name": "output0", "dtype": "", "shape": [], "is_input": False}],
            "aliased_io": [], "hardware_compatible": False, "device_id": 0,
            "serialized_metadata": "gAR9lC4=", "target_platform": "linux_x86_64"}
    text = json.dumps(meta, separators=(",", ":")).encode()
    eo = (32 + len(text) + 15) // 16 * 16
    engine = b"ftrt" * 10
    return (struct.pack("<4sIIIQ8s", b"TR01", 32, len(text), eo, len(engine), b"\x01" + b"\0" * 7)
            + text + b"\0" * (eo - 32 - len(text)) + engine)
