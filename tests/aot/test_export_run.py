"""Export real programs (real TensorRT-RTX engines) and run them through
executorch.runtime, TensorRT partitions on onnxruntime (fallback allowed)."""
from __future__ import annotations

import torch
import pytest
from executorch.runtime import Runtime

import executorch_tensorrt
from executorch_tensorrt.tensorrt.flavor import load_tensorrt
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.examples.models import example
from executorch_tensorrt.program.info import read_program
from helpers import tensorrt_blobs


def run(path, inputs):
    method = Runtime.get().load_program(str(path)).load_method("forward")
    return method.execute(list(inputs))


def eager(model, inputs):
    with torch.no_grad():
        out = model(*inputs)
    return out if isinstance(out, (tuple, list)) else (out,)


def trt_delegates(path):
    (method,) = read_program(path)
    return method, [d for d in method.delegates if d.backend == "TensorRTBackend"]


@pytest.mark.parametrize("name", ["add", "cnn", "transformer"])
def test_export_and_run_matches_eager(name, exported, allow_fallback):
    model, inputs, path = exported(name)
    method, delegates = trt_delegates(path)
    assert delegates, f"{name}: no TensorRTBackend delegate"
    assert method.operators == [], f"{name}: ops left outside TensorRT: {method.operators}"
    trt = load_tensorrt()
    for d in delegates:
        assert d.metadata["trt_flavor"] == trt.flavor
        assert d.metadata["trt_version"] == trt.version
        # Weights in named data: no plan without a GPU at export (built at load).
        assert d.metadata["engine"] == "none" and d.engine_size == 0 and d.onnx_size > 0
    outputs = run(path, inputs)
    for got, want in zip(outputs, eager(model, inputs), strict=True):
        assert got.shape == want.shape
        assert torch.allclose(got, want, atol=5e-6, rtol=1e-5), (got - want).abs().max()


def test_engine_is_real_tensorrt_plan(exported):
    """The engine bytes are a serialized TensorRT-RTX plan (its own magic,
    b"vtrt", not a copy of anything we wrote), and models get different plans.
    Deserializing needs a GPU TensorRT-RTX supports; none is reachable here.
    inline_weights=True: the self-contained blob, whose plan is built at export."""
    from executorch_tensorrt.blob import read_blob

    engines = {name: read_blob(tensorrt_blobs(exported(name, inline_weights=True)[2])[0]).engine
               for name in ("cnn", "add")}
    for name, engine in engines.items():
        assert engine[:4] == b"vtrt", (name, engine[:16])
        assert len(engine) > 1024, name
    assert engines["cnn"] != engines["add"]
    assert engines["cnn"][16:] != engines["add"][16:]


def test_lower_level_route(tmp_path, allow_fallback):
    from executorch.exir import to_edge_transform_and_lower

    model, inputs = example("cnn")
    ep = torch.export.export(model, inputs)
    edge = to_edge_transform_and_lower(
        ep, partitioner=[executorch_tensorrt.TensorRTPartitioner(progress=None)])
    path = tmp_path / "cnn.pte"
    path.write_bytes(edge.to_executorch().buffer)
    _, delegates = trt_delegates(path)
    assert len(delegates) == 1
    (got,) = run(path, inputs)
    assert torch.allclose(got, eager(model, inputs)[0], atol=5e-6, rtol=1e-5)


def test_mixed_program_bitwise_and_stays_on_portable_kernel(exported, allow_fallback):
    model, inputs, path = exported("bitwise")
    method, delegates = trt_delegates(path)
    assert len(delegates) >= 1
    assert any(op.startswith("aten::bitwise_and") for op in method.operators), method.operators
    # Everything else went to TensorRT: bitwise_and is the only op outside.
    assert all(op.startswith("aten::bitwise_and") for op in method.operators), method.operators
    (got,) = run(path, inputs)
    assert torch.allclose(got, eager(model, inputs)[0], atol=5e-6, rtol=1e-5)


def test_exclude_ops_keeps_convolution_off_tensorrt(exported, allow_fallback):
    model, inputs, path = exported("cnn", exclude_ops=("aten.convolution.default",))
    method, delegates = trt_delegates(path)
    assert delegates
    assert any("convolution" in op for op in method.operators), method.operators
    (got,) = run(path, inputs)
    assert torch.allclose(got, eager(model, inputs)[0], atol=5e-6, rtol=1e-5)


class Erfinv(torch.nn.Module):
    def forward(self, x):
        return torch.erfinv(x)


def test_erfinv_runs_in_tensorrt_and_matches_eager(tmp_path, allow_fallback):
    """torch's exporter has no erfinv; our translation (aot/onnx/extra_ops.py)
    puts it in TensorRT. Checked over [-1, 1] densely, at the poles and outside."""
    x = torch.cat([torch.linspace(-1, 1, 100_001), torch.tensor([
        -1.0, 1.0, 1 - 2**-24, -(1 - 2**-24), 0.0, -0.0, 1.5, -7.0, float("nan"),
        float("inf"), 1e-30, 0.999999])])
    # erfinv(1.0) is inf, which a .expected file cannot hold: none is written.
    path = executorch_tensorrt.export(Erfinv(), (x,), tmp_path / "erfinv.pte", progress=None,
                                      write_expected_file=False)
    method, delegates = trt_delegates(path)
    assert len(delegates) == 1 and method.operators == [], (method.delegates, method.operators)
    (out,) = run(path, (x,))
    ref = torch.erfinv(x)
    assert torch.equal(out.isnan(), ref.isnan()), x[out.isnan() != ref.isnan()]
    assert torch.equal(out.isinf(), ref.isinf()) and torch.equal(out[ref.isinf()], ref[ref.isinf()])
    finite = ref.isfinite()
    rel = ((out[finite] - ref[finite]).abs() / ref[finite].abs().clamp_min(1e-30)).max().item()
    assert rel < 1e-6, rel


def test_erfinv_example_is_one_tensorrt_partition(exported, allow_fallback):
    model, inputs, path = exported("erfinv")
    method, delegates = trt_delegates(path)
    assert len(delegates) == 1 and method.operators == [], (method.delegates, method.operators)
    (out,) = run(path, inputs)
    assert torch.allclose(out, eager(model, inputs)[0], atol=1e-5)


def test_missing_runtime_kernel_fails_export_before_writing(tmp_path):
    # TensorRT translates erfinv; kept off it, erfinv has no kernel in the PyPI runtime.
    model, inputs = example("erfinv")
    path = tmp_path / "erfinv.pte"
    with pytest.raises(ExportError) as info:
        executorch_tensorrt.export(model, inputs, path, progress=None,
                                   exclude_ops=["aten.erfinv.default"])
    message = str(info.value)
    assert "aten.erfinv" in message and "aten::erfinv" in message
    assert "0x14" in message and "CudaPartitioner" in message
    assert not path.exists()


def test_without_fallback_loading_fails_with_the_cause(exported, no_fallback, capfd):
    _, _, path = exported("add")
    with pytest.raises(RuntimeError, match="0x:?30"):
        Runtime.get().load_program(str(path)).load_method("forward")
    cause = executorch_tensorrt.last_error()
    assert "CUDA" in cause and "EXECUTORCH_TENSORRT_FALLBACK=onnxruntime" in cause
    err = capfd.readouterr().err
    assert "TensorRTBackend init failed" in err and "CUDA" in err


def test_bad_fallback_value_is_named(exported, monkeypatch):
    _, _, path = exported("add")
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "tensorflow")
    with pytest.raises(RuntimeError):
        Runtime.get().load_program(str(path)).load_method("forward")
    assert "unknown fallback 'tensorflow'" in executorch_tensorrt.last_error()


def test_corrupted_blob_in_program_fails_to_load(exported, tmp_path, allow_fallback, capfd):
    _, _, path = exported("add")
    data = bytearray(path.read_bytes())
    at = data.find(b"TR01")
    assert at > 0
    data[at:at + 4] = b"XX01"
    bad = tmp_path / "bad.pte"
    bad.write_bytes(bytes(data))
    with pytest.raises(RuntimeError):
        Runtime.get().load_program(str(bad)).load_method("forward")
    assert "magic" in capfd.readouterr().err.lower()


def test_export_does_not_pass_on_torch_deprecation_noise(tmp_path):
    """torch.export warns about its own pytree API while ExecuTorch lowers;
    a caller cannot act on it, so export keeps it from burying real warnings."""
    import warnings

    model, inputs = example("add")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executorch_tensorrt.export(model, inputs, tmp_path / "add.pte", progress=None)
    noise = [str(w.message) for w in caught if "LeafSpec" in str(w.message)]
    assert not noise, noise
