"""Mixed-backend programs, require_backends, split warnings, several methods,
dynamic shapes. All real: engines built, programs run through executorch.runtime."""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.runtime import Runtime

import executorch_tensorrt
from executorch_tensorrt.aot.export import PartitionSplitWarning, export_program
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.examples.models import example
from executorch_tensorrt.program.info import read_program
from helpers import tensorrt_blobs


def load(path, method="forward"):
    return Runtime.get().load_program(str(path)).load_method(method)


def test_tensorrt_plus_xnnpack_with_convolutions_excluded(tmp_path, allow_fallback):
    model, inputs = example("cnn")
    result = export_program(model, inputs, tmp_path / "cnn.pte", progress=None,
                            exclude_ops={"aten.convolution.default"},
                            partitioners=[XnnpackPartitioner()],
                            require_backends={"TensorRTBackend", "XnnpackBackend"})
    (method,) = read_program(result.path)
    ids = [d.backend for d in method.delegates]
    assert "TensorRTBackend" in ids and "XnnpackBackend" in ids
    # No TensorRT partition holds a convolution: its ONNX has no Conv node.
    import onnx

    from executorch_tensorrt.blob import read_blob
    for data in tensorrt_blobs(result.path):
        ops = {n.op_type for n in onnx.load_model_from_string(read_blob(data).onnx).graph.node}
        assert "Conv" not in ops
    # It runs, and matches its .expected file within 1e-3 through the runner.
    run = subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", "run",
                          str(result.path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    verify = subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", "verify",
                             str(result.expected_path), "--tolerance", "1e-3"],
                            input=run.stdout, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    (got,) = load(result.path).execute(list(inputs))
    assert torch.allclose(got, model(*inputs), atol=1e-3)


def test_require_backends_names_what_is_missing(tmp_path):
    model, inputs = example("add")
    path = tmp_path / "add.pte"
    with pytest.raises(ExportError, match="XnnpackBackend"):
        executorch_tensorrt.export(model, inputs, path, progress=None,
                                   require_backends={"TensorRTBackend", "XnnpackBackend"})
    assert not path.exists()


def test_split_partitions_warn_with_the_splitting_ops(tmp_path):
    model, inputs = example("bitwise")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executorch_tensorrt.export(model, inputs, tmp_path / "b.pte", progress=None)
    splits = [w for w in caught if issubclass(w.category, PartitionSplitWarning)]
    assert len(splits) == 1
    assert "aten.bitwise_and" in str(splits[0].message)


def test_single_partition_does_not_warn(tmp_path):
    model, inputs = example("add")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PartitionSplitWarning)
        executorch_tensorrt.export(model, inputs, tmp_path / "a.pte", progress=None)


def test_several_methods_in_one_program(tmp_path, allow_fallback):
    cnn, cnn_in = example("cnn")
    tb, tb_in = example("transformer")
    programs = {"classify": torch.export.export(cnn, cnn_in),
                "encode": torch.export.export(tb, tb_in)}
    result = export_program(programs, None, tmp_path / "multi.pte", progress=None)
    methods = {m.name: m for m in read_program(result.path)}
    assert set(methods) == {"classify", "encode"}
    for m in methods.values():
        assert [d.backend for d in m.delegates] == ["TensorRTBackend"]
    (a,) = load(result.path, "classify").execute(list(cnn_in))
    (b,) = load(result.path, "encode").execute(list(tb_in))
    assert torch.allclose(a, cnn(*cnn_in), atol=5e-6, rtol=1e-5)
    assert torch.allclose(b, tb(*tb_in), atol=5e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_dynamic_batch_runs_across_the_bounds(name, tmp_path, allow_fallback):
    model, (x,) = example(name)
    batch = torch.export.Dim("batch", min=1, max=8)
    x = torch.randn(4, *x.shape[1:])
    path = executorch_tensorrt.export(model, (x,), tmp_path / f"{name}.pte", progress=None,
                                      dynamic_shapes=({0: batch},))
    (method,) = read_program(path)
    (trt,) = method.delegates
    (profile,) = trt.metadata["profiles"]
    assert profile["min"][0] == 1 and profile["max"][0] == 8
    m = load(path)
    for n in range(1, 9):
        xs = torch.randn(n, *x.shape[1:])
        (got,) = m.execute([xs])
        assert got.shape[0] == n
        with torch.no_grad():
            assert torch.allclose(got, model(xs), atol=5e-6, rtol=1e-5), n
    with pytest.raises(RuntimeError):
        m.execute([torch.randn(9, *x.shape[1:])])  # above the bound: ExecuTorch refuses


def test_shape_outside_profile_names_input_shape_and_bounds(tmp_path, allow_fallback, capfd):
    model, (x,) = example("cnn")
    batch = torch.export.Dim("batch", min=3, max=6)
    path = executorch_tensorrt.export(model, (torch.randn(4, *x.shape[1:]),),
                                      tmp_path / "b.pte", progress=None,
                                      dynamic_shapes=({0: batch},))
    m = load(path)
    with pytest.raises(RuntimeError):
        m.execute([torch.randn(2, *x.shape[1:])])  # below min: the engine's bound
    cause = executorch_tensorrt.last_error()
    assert "arg_0" in cause and "[2, 3, 32, 32]" in cause
    assert "min [3, 3, 32, 32]" in cause and "max [6, 3, 32, 32]" in cause


def test_unbounded_dynamic_dimension_is_rejected(tmp_path):
    model, (x,) = example("add")
    with pytest.raises(ExportError, match="upper bound"):
        executorch_tensorrt.export(model, (x,), tmp_path / "u.pte", progress=None,
                                   dynamic_shapes=({0: torch.export.Dim("b")},))


@pytest.mark.parametrize("name, precision, atol", [
    # about 10x the errors measured on 2026-11-30: 9.5e-5, 2.0e-4, 1.6e-3
    ("cnn", "fp16", 1e-3), ("transformer", "fp16", 2e-3), ("transformer", "bf16", 1.5e-2)])
def test_reduced_precision_engines(name, precision, atol, tmp_path, allow_fallback):
    """The engine is built from an fp16/bf16 graph (its embedded ONNX carries
    reduced-precision weights); I/O stay fp32. The fallback runs it in fp32, so
    this checks weight rounding, not the engine's activations: docs/precision.md."""
    import onnx

    from executorch_tensorrt.blob import read_blob
    model, inputs = example(name)
    path = executorch_tensorrt.export(model, inputs, tmp_path / "m.pte", progress=None,
                                      precision=precision)
    (data,) = tensorrt_blobs(path)
    blob = read_blob(data)
    assert blob.metadata["precision"] == precision
    kinds = {t.data_type for t in onnx.load_model_from_string(blob.onnx).graph.initializer}
    want = onnx.TensorProto.FLOAT16 if precision == "fp16" else onnx.TensorProto.BFLOAT16
    assert want in kinds and onnx.TensorProto.FLOAT not in kinds
    assert [b["dtype"] for b in blob.metadata["io_bindings"]] == ["float32", "float32"]
    (got,) = load(path).execute(list(inputs))
    with torch.no_grad():
        want_out = model(*inputs)
    assert got.dtype == torch.float32
    assert torch.allclose(got, want_out, atol=atol, rtol=0), (got - want_out).abs().max()


class _NonZero(torch.nn.Module):  # data-dependent output shape
    def forward(self, x):
        return torch.nonzero(torch.relu(x)).sum() + x.sin().sum()


class _Cond(torch.nn.Module):  # control flow
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)) + 1


class _Complex(torch.nn.Module):  # a dtype TensorRT has no type for
    def forward(self, x):
        c = torch.view_as_complex(x.reshape(4, 2))
        return torch.view_as_real(c * c).cos()


@pytest.mark.parametrize("model, inputs, node, reason", [
    (_NonZero(), [torch.randn(4, 4)], "aten_nonzero_default", "parser"),
    (_Cond(), [torch.randn(4), -torch.rand(4) - 1], "cond", "control flow"),
])
def test_unsupported_constructs_stay_with_executorch(model, inputs, node, reason, tmp_path,
                                                     allow_fallback):
    result = export_program(model, (inputs[0],), tmp_path / "m.pte", progress=None)
    rejected = result.partitioner.reports[0].rejected
    assert reason in rejected[node], rejected
    assert "TensorRTBackend" in result.backends["forward"]
    m = load(result.path)
    for x in inputs:  # both branches of cond, data-dependent nonzero
        (got,) = m.execute([x])
        assert torch.allclose(got, model(x), atol=1e-5)


def test_complex_tensors_are_rejected_clearly(tmp_path):
    path = tmp_path / "c.pte"
    with pytest.raises(ExportError, match="view_as_complex"):
        executorch_tensorrt.export(_Complex(), (torch.randn(8),), path, progress=None)
    assert not path.exists()


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_reduced_precision_with_two_dynamic_inputs(precision, tmp_path, allow_fallback):
    """The reduced-precision re-export takes its inputs as varargs; with more than
    one dynamic input it once failed ("inputs has 1 elements, but dynamic_shapes
    has 2"), so such a partition silently stayed off TensorRT."""
    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, x, y):
            return torch.nn.functional.gelu(self.proj(x)) * y

    torch.manual_seed(0)
    model = TwoInputs().eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    args = (torch.randn(4, 16), torch.randn(4, 16))
    path = executorch_tensorrt.export(model, args, tmp_path / "two.pte", progress=None,
                                      precision=precision,
                                      dynamic_shapes=({0: batch}, {0: batch}))
    (method,) = read_program(path)
    (trt,) = method.delegates
    assert trt.metadata["precision"] == precision and method.operators == []
    m = load(path)
    for n in (1, 5, 8):
        xs = (torch.randn(n, 16), torch.randn(n, 16))
        (got,) = m.execute(list(xs))
        with torch.no_grad():
            want = model(*xs)
        tol = 2e-2 if precision == "fp16" else 1e-1
        assert got.dtype == torch.float32 and torch.allclose(got, want, atol=tol, rtol=tol), n
