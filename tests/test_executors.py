"""The executors' checks that run without a GPU: every refusal names its cause."""
from __future__ import annotations

import pytest

from executorch_tensorrt.aot.tensorrt_import import load_tensorrt
from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.executor_table import create_executor, fallback_requested
from executorch_tensorrt.runtime.tensorrt_executor import EngineUnavailable, TensorRTExecutor

BINDINGS = [{"name": "x", "dtype": "float32", "shape": [2, 3], "is_input": True},
            {"name": "y", "dtype": "float32", "shape": [2, 3], "is_input": False}]


def blob(**metadata):
    trt = load_tensorrt()
    meta = {"io_bindings": BINDINGS, "trt_flavor": trt.flavor, "trt_version": trt.version,
            "compute_capabilities": "all", **metadata}
    return read_blob(write_blob(b"\0" * 64, meta))


def test_no_gpu_is_named():
    with pytest.raises(EngineUnavailable, match="CUDA driver"):
        TensorRTExecutor(blob())


def test_other_tensorrt_version_is_named():
    with pytest.raises(EngineUnavailable, match=r"built with tensorrt_rtx 0\.1\.2.*this process has"):
        TensorRTExecutor(blob(trt_version="0.1.2"))


def test_missing_tensorrt_flavour_is_named():
    with pytest.raises(EngineUnavailable, match="tensorrt 10.0.*not installed"):
        TensorRTExecutor(blob(trt_flavor="tensorrt", trt_version="10.0"))


def test_without_fallback_the_error_says_how_to_allow_it(monkeypatch):
    monkeypatch.delenv("EXECUTORCH_TENSORRT_FALLBACK", raising=False)
    with pytest.raises(EngineUnavailable, match="EXECUTORCH_TENSORRT_FALLBACK=onnxruntime"):
        create_executor(blob(), None)


def test_fallback_needs_the_embedded_onnx(monkeypatch):
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    with pytest.raises(ValueError, match="carries no ONNX model"):
        create_executor(blob(), None)


@pytest.mark.parametrize("option, env, want", [
    (None, "", None), (None, "onnxruntime", "onnxruntime"), ("onnxruntime", "", "onnxruntime"),
    (None, "OFF", None), ("onnxruntime", "off", "onnxruntime")])
def test_fallback_choice(option, env, want, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", env)
    assert fallback_requested(option) == want


def test_torch_tensorrt_blobs_without_dtypes_are_accepted():
    """Torch-TensorRT's ExecuTorch path records dtype "" and shape []; the
    engine knows them, so the bindings leave them open."""
    meta = {"io_bindings": [dict(b, dtype="", shape=[]) for b in BINDINGS]}
    inputs, outputs = split_bindings(read_blob(write_blob(b"\0" * 64, meta)).metadata)
    assert inputs[0].dtype is None and outputs[0].name == "y"
