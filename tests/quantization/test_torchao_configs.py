"""torchao `quantize_` configs beyond Int8WeightOnlyConfig: IntxWeightOnlyConfig
(int8 per channel, int4 per group) and Float8WeightOnlyConfig (per row, per
tensor) exported with TensorRT-RTX's real builder taking the quantized linears
(DequantizeLinear over int8 / int4 / float8 named data), run through the
onnxruntime fallback and compared with the eager torchao model; the configs
TensorRT cannot take (dynamic activations, per-group fp8, fp8 below SM89)
refused with the layer named and the remedy (asymmetric weights are taken:
test_affine_weights.py)."""
from __future__ import annotations

import onnx
import pytest
import torch
import torchao.quantization as ao
from executorch.runtime import Runtime
from torchao.quantization import Float8Tensor
from torchao.quantization.quantize_.workflows.float8.float8_tensor import (
    QuantizeTensorToFloat8Kwargs)

import executorch_tensorrt  # noqa: F401 - registers the backend
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.quantization import QuantizationError, lower_torchao
from tests.helpers import artifact_bytes, tensorrt_blobs

FP8_TARGETS = ("SM89", "SM120")


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 64)).eval()


_CASES = {
    # config, blob dtype, DequantizeLinear attributes, report line, size goal
    "int8_intx": (lambda: ao.IntxWeightOnlyConfig(weight_dtype=torch.int8,
                                                  granularity=ao.PerAxis(0)),
                  "int8", {"axis": 0}, "int8 weight-only (per channel)", 0.27),
    "int4_intx": (lambda: ao.IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                                  granularity=ao.PerGroup(64)),
                  "int4", {"axis": 1, "block_size": 64}, "int4 weight-only (group 64)", 0.15),
    "fp8_per_row": (lambda: ao.Float8WeightOnlyConfig(), "float8", {"axis": 0},
                    "fp8 weight-only (per channel)", 0.27),
    "fp8_per_tensor": (lambda: ao.Float8WeightOnlyConfig(granularity=ao.PerTensor()), "float8",
                       {"axis": 0}, "fp8 weight-only (per tensor)", 0.27),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_config_exports_quantized_and_runs_like_eager(case, tmp_path, monkeypatch):
    config, dtype, attrs, line, goal = _CASES[case]
    model = _mlp()
    fp32_weight_bytes = sum(m.weight.numel() * 4 for m in model if hasattr(m, "weight"))
    ao.quantize_(model, config())
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    result = export_program(model, (x,), tmp_path / "q.pte", external_weights=True,
                            progress=None, compute_capabilities=FP8_TARGETS)
    assert result.backends == {"forward": ["TensorRTBackend"]}
    assert result.report.quantization == {"0": line, "2": line, "4": line}
    (blob_bytes,) = tensorrt_blobs(tmp_path / "q.pte")
    blob = read_blob(blob_bytes)
    quantized = [w for w in blob.metadata["weights"] if w["dtype"] == dtype]
    assert len(quantized) == 3
    per_byte = 0.5 if dtype == "int4" else 1
    assert all(w["nbytes"] == w["shape"][0] * w["shape"][1] * per_byte for w in quantized)
    graph = onnx.load_from_string(blob.onnx).graph
    dq = [n for n in graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 3
    for node in dq:
        got = {a.name: a.i for a in node.attribute}
        assert {k: got.get(k, 1 if k == "axis" else 0) for k in attrs} == attrs
    size = artifact_bytes(result)
    assert size / fp32_weight_bytes <= goal
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    method = Runtime.get().load_program(tmp_path / "q.pte",
                                        data_path=result.data_paths[0]).load_method("forward")
    x2 = torch.randn(4, 256, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(method.execute([x2])[0], model(x2), atol=1e-5, rtol=1e-5)


def test_fp8_below_sm89_is_refused_naming_the_remedy(tmp_path):
    model = _mlp()
    ao.quantize_(model, ao.Float8WeightOnlyConfig())
    with pytest.raises(QuantizationError, match="fp8_weight_only needs compute capability SM89"
                                                ".*SM75.*compute_capabilities"):
        export_program(model, (torch.randn(4, 256),), tmp_path / "q.pte", progress=None)
    assert not (tmp_path / "q.pte").exists()


def test_dynamic_activation_is_refused():
    # What Float8DynamicActivationFloat8WeightConfig makes (its quantize_ itself needs a
    # CUDA GPU of SM89+), built directly on the CPU.
    model = _mlp()
    model[2].weight = torch.nn.Parameter(
        Float8Tensor.from_hp(model[2].weight.detach(), granularity=ao.PerRow(),
                             act_quant_kwargs=QuantizeTensorToFloat8Kwargs()),
        requires_grad=False)
    with pytest.raises(QuantizationError, match="layer '2'.*dynamic activation.*constant scales"):
        lower_torchao(model)


def test_int4_group_tensorrt_does_not_take_is_refused():
    model = _mlp()
    ao.quantize_(model, ao.IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                                granularity=ao.PerGroup(256)))
    with pytest.raises(QuantizationError, match="layer '0'.*int4 block size.*PerGroup"):
        lower_torchao(model)


def test_fp8_per_group_is_refused():
    model = _mlp()
    ao.quantize_(model, ao.Float8WeightOnlyConfig(granularity=ao.PerGroup(128)))
    with pytest.raises(QuantizationError, match="layer '0'.*per group.*PerRow"):
        lower_torchao(model)


def test_torchao_int4_weight_only_config_needs_what_is_not_here():
    """torchao 0.18's Int4WeightOnlyConfig cannot quantize on this CPU at all (docs say
    so and name IntxWeightOnlyConfig); if that changes, this fails and the docs must."""
    with pytest.raises((ImportError, NotImplementedError), match="mslk|cpu"):
        ao.quantize_(_mlp(), ao.Int4WeightOnlyConfig(group_size=64))
