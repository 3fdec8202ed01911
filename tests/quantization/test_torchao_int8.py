"""torchao Int8WeightOnlyConfig models exported with TensorRT taking the
quantized linears (ONNX DequantizeLinear over int8 named data), run through the
onnxruntime fallback and compared with the eager quantized model."""
from __future__ import annotations

import onnx
import pytest
import torch

torchao_quant = pytest.importorskip("torchao.quantization")

from executorch.runtime import Runtime  # noqa: E402

import executorch_tensorrt  # noqa: E402,F401 - registers the backend
from executorch_tensorrt.aot.export import export_program  # noqa: E402
from executorch_tensorrt.quantization import QuantizationError, lower_torchao  # noqa: E402
from tests.helpers import artifact_bytes, tensorrt_blobs  # noqa: E402

from executorch_tensorrt.blob import read_blob  # noqa: E402


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 64)).eval()


def test_int8_weight_only_exports_quantized_and_runs(tmp_path, monkeypatch):
    model = _mlp()
    fp32_weight_bytes = sum(m.weight.numel() * 4 for m in model if hasattr(m, "weight"))
    torchao_quant.quantize_(model, torchao_quant.Int8WeightOnlyConfig())
    x = torch.randn(4, 256)
    result = export_program(model, (x,), tmp_path / "q.pte", external_weights=True,
                            progress=None)
    assert result.backends == {"forward": ["TensorRTBackend"]}
    (blob_bytes,) = tensorrt_blobs(tmp_path / "q.pte")
    blob = read_blob(blob_bytes)
    weights = {w["name"]: w for w in blob.metadata["weights"]}
    int8 = [w for w in weights.values() if w["dtype"] == "int8"]
    assert len(int8) == 3 and all(w["nbytes"] == w["shape"][0] * w["shape"][1] for w in int8)
    graph = onnx.load_from_string(blob.onnx).graph
    assert [n.op_type for n in graph.node].count("DequantizeLinear") == 3
    size = artifact_bytes(result)
    assert size / fp32_weight_bytes <= 0.27
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    method = Runtime.get().load_program(tmp_path / "q.pte",
                                        data_path=result.data_paths[0]).load_method("forward")
    out = method.execute([x])[0]
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


def test_asymmetric_zero_point_is_refused():
    model = _mlp()
    torchao_quant.quantize_(model, torchao_quant.Int8WeightOnlyConfig())
    weight = model[2].weight
    weight.zero_point.add_(1)
    with pytest.raises(QuantizationError, match="layer '2'.*symmetric"):
        lower_torchao(model)
