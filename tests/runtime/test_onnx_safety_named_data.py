"""onnx_safety admits exactly one kind of external data: a top-level
initializer listed in the blob's "weights", at the named-data sentinel, with
nothing else in its external_data and the dtype/shape its entry records.
Everything else is still refused before onnxruntime, the fp32 upcast or the
engine build reads it (the ./secret.txt cases of test_external_data.py)."""
from __future__ import annotations

import numpy as np
import pytest

import named_data_programs as nd
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.errors import InvalidProgramError, RebuildImpossible
from executorch_tensorrt.runtime.tensorrt.portability import rebuilt_engine
from executorch_tensorrt.runtime.named_data import InMemoryNamedData, blob_weights
from executorch_tensorrt.runtime.onnx_safety import self_contained_onnx
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor
from executorch_tensorrt.tensorrt.flavor import load_tensorrt

W, B = nd.weights()
ENTRY = nd.weight_entry(W)


@pytest.fixture
def secret_cwd(tmp_path, monkeypatch):
    """A working directory holding secret.txt (the bytes a reader that followed
    a path would put into the output) and an empty engine cache."""
    (tmp_path / "secret.txt").write_bytes(np.full(W.shape, 7, np.float32).tobytes())
    (tmp_path / "etrt-named-data").write_bytes(np.full(W.shape, 7, np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def blob_with(initializer=None, entries=None):
    onnx = nd.weightless_onnx(W, B, w_initializer=initializer)
    return read_blob(nd.named_blob(W, B, onnx=onnx, entries=entries))


def named():
    return InMemoryNamedData({ENTRY["key"]: W.tobytes()})


def refused_everywhere(blob, match: str) -> None:
    with pytest.raises(InvalidProgramError, match=match):
        self_contained_onnx(blob)
    with pytest.raises(InvalidProgramError, match=match):
        OnnxRuntimeExecutor(blob, named())
    with pytest.raises(RebuildImpossible, match=match):
        rebuilt_engine(blob, load_tensorrt(), "SM89", blob_weights(blob, named()))


def test_listed_sentinel_weight_is_admitted(secret_cwd):
    blob = blob_with()
    assert self_contained_onnx(blob) == blob.onnx


def test_sentinel_weight_not_listed_is_refused(secret_cwd):
    # The blob lists a weight named "V"; the model's W at the sentinel is not listed.
    other = dict(ENTRY, name="V")
    refused_everywhere(blob_with(entries=[other]), r"initializer 'W' .* does not list")
    # And with no named-data weights at all (an inline blob's metadata).
    from executorch_tensorrt.blob import write_blob
    meta = {k: v for k, v in blob_with().metadata.items()
            if k not in ("weights", "weights_location", "engine")}
    inline = read_blob(write_blob(b"\0" * 16, meta, onnx=blob_with().onnx))
    with pytest.raises(InvalidProgramError, match=r"initializer 'W' .* does not list"):
        OnnxRuntimeExecutor(inline)


@pytest.mark.parametrize("location,extra", [
    ("secret.txt", {}),                                 # a real path
    ("./etrt-named-data", {}),                          # a path that resolves to a file here
    ("etrt-named-data", {"offset": "0"}),               # the sentinel plus an offset
    ("etrt-named-data", {"length": "192"}),              # ... plus a length
    ("etrt-named-data", {"checksum": "x"}),             # ... plus any other key
])
def test_listed_weight_with_anything_but_the_bare_sentinel_is_refused(secret_cwd, location,
                                                                       extra):
    init = nd.sentinel_initializer("W", "float32", W.shape, location=location, extra=extra)
    refused_everywhere(blob_with(init), r"initializer 'W'.*only \[\('location', "
                                        r"'etrt-named-data'\)\] is accepted")


def test_listed_weight_that_disagrees_with_its_entry_is_refused(secret_cwd):
    # TensorRT would read as many bytes as the model's dims say: they must match the entry.
    bigger = nd.sentinel_initializer("W", "float32", (40, 12))
    refused_everywhere(blob_with(bigger), r"initializer 'W' is FLOAT \[40, 12\] .* says float32 "
                                          r"\[4, 12\]")
    fp16 = nd.sentinel_initializer("W", "float16", W.shape)
    refused_everywhere(blob_with(fp16), r"FLOAT16 \[4, 12\] .* says float32")


def test_listed_weight_with_inline_bytes_too_is_refused(secret_cwd):
    init = nd.sentinel_initializer("W", "float32", W.shape)
    init.raw_data = W.tobytes()
    refused_everywhere(blob_with(init), "also carries data inline")


def test_listed_weight_missing_from_the_model_is_refused(secret_cwd):
    extra = dict(ENTRY, name="not_in_model")
    refused_everywhere(blob_with(entries=[ENTRY, extra]),
                       r"lists \['not_in_model'\], which are not initializers")
