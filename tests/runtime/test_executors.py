"""The executors' checks that run without a GPU: every refusal names its cause."""
from __future__ import annotations

import pytest

from executorch_tensorrt.tensorrt.flavor import load_tensorrt
from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.errors import EngineUnavailable, RebuildImpossible
from executorch_tensorrt.runtime.tensorrt.portability import built_here, rebuilt_engine
from executorch_tensorrt.runtime.choose import create_executor, fallback_requested
from executorch_tensorrt.runtime.tensorrt.executor import TensorRTExecutor
from helpers import tensorrt_blobs

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


def test_engine_from_another_tensorrt_is_not_used_as_is():
    trt = load_tensorrt()
    here = blob()
    assert built_here(here, trt, "SM89")
    assert not built_here(blob(trt_version="0.1.2"), trt, "SM89")
    assert not built_here(blob(trt_flavor="tensorrt"), trt, "SM89")
    assert not built_here(blob(compute_capabilities=["SM120"]), trt, "SM89")


def test_rebuild_from_embedded_onnx_is_cached_on_disk(exported, tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(tmp_path / "cache"))
    _, _, path = exported("add", inline_weights=True)  # a blob with a plan
    data = tensorrt_blobs(path)[0]
    old = read_blob(data)
    stale = read_blob(write_blob(old.engine, dict(old.metadata, trt_version="0.1.2"),
                                 onnx=old.onnx))
    trt = load_tensorrt()
    engine = rebuilt_engine(stale, trt, "SM89")
    cached = list((tmp_path / "cache").glob("*.engine"))
    assert len(cached) == 1 and cached[0].read_bytes().endswith(engine)  # after its header
    assert engine[:16] == old.engine[:16]  # a plan of the installed TensorRT
    stamp = cached[0].stat().st_mtime_ns
    assert rebuilt_engine(stale, trt, "SM89") == engine  # from the cache, not rebuilt
    assert cached[0].stat().st_mtime_ns == stamp


def test_rebuild_refusals_name_the_cause(monkeypatch, tmp_path):
    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(tmp_path))
    trt = load_tensorrt()
    with pytest.raises(RebuildImpossible, match="no ONNX model"):
        rebuilt_engine(blob(trt_version="0.1.2"), trt, "SM89")
    with_onnx = read_blob(write_blob(b"\0" * 64, blob().metadata, onnx=b"not onnx"))
    with pytest.raises(RebuildImpossible, match="cannot build for SM90"):
        rebuilt_engine(with_onnx, trt, "SM90")  # the H200's capability: not in TensorRT-RTX


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
    assert inputs[0].dtype is None and inputs[0].shape is None and outputs[0].name == "y"
