"""quantize(): INT4 weight-only (our own path) and INT8 weight-only, exported
with TensorRT taking the quantized linears (opset-21 block DequantizeLinear
over int4 named data packed two per byte), run through the onnxruntime
fallback and compared with the eager quantized model; bad input and crafted
quantized blobs refused with the cause named."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from executorch.runtime import Runtime

import executorch_tensorrt  # noqa: F401 - registers the backend
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.aot.partition.report import read_report
from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.blob.format import BlobError
from executorch_tensorrt.errors import InvalidProgramError, NamedDataError
from executorch_tensorrt.quantization import QuantizationError, quantize, refusal
from executorch_tensorrt.runtime.choose import create_executor
from executorch_tensorrt.runtime.named_data import InMemoryNamedData
from tests.helpers import artifact_bytes, tensorrt_blobs

GROUP = 64
LAYERS = ("0", "2", "4")


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 64)).eval()


@pytest.fixture(scope="module")
def int4(tmp_path_factory):
    """The int4 MLP exported once (weights in a .ptd), its blob and inputs."""
    tmp = tmp_path_factory.mktemp("int4")
    fp32 = _mlp()
    model = quantize(fp32, scheme="int4_weight_only", group_size=GROUP)
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    result = export_program(model, (x,), tmp / "q4.pte", external_weights=True, progress=None)
    (blob_bytes,) = tensorrt_blobs(tmp / "q4.pte")
    return fp32, model, x, result, blob_bytes


def test_int4_weights_are_stored_packed_and_dequantized_by_blocks(int4):
    fp32, model, x, result, blob_bytes = int4
    blob = read_blob(blob_bytes)
    packed = [w for w in blob.metadata["weights"] if w["dtype"] == "int4"]
    assert [w["shape"] for w in packed] == [[512, 256], [512, 512], [64, 512]]
    assert all(w["nbytes"] == w["shape"][0] * w["shape"][1] // 2 for w in packed)
    graph_model = onnx.load_from_string(blob.onnx)
    assert {o.domain: o.version for o in graph_model.opset_import}[""] >= 21
    dq = [n for n in graph_model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 3
    for node in dq:
        attrs = {a.name: a.i for a in node.attribute}
        assert attrs == {"axis": 1, "block_size": GROUP}
    int4_inits = {t.name for t in graph_model.graph.initializer
                  if t.data_type == onnx.TensorProto.INT4}
    assert int4_inits == {w["name"] for w in packed}
    fp32_weight_bytes = sum(fp32[int(i)].weight.numel() * 4 for i in LAYERS)
    size = artifact_bytes(result)
    assert size / fp32_weight_bytes <= 0.15


def test_int4_fallback_matches_the_eager_quantized_model(int4, monkeypatch):
    fp32, model, x, result, _ = int4
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    method = Runtime.get().load_program(result.path,
                                        data_path=result.data_paths[0]).load_method("forward")
    out = method.execute([x])[0]
    with torch.no_grad():
        eager = model(x)
        eager_fp32 = fp32(x)
    # One quantization step of the output: the largest weight step times |x|'s L1 norm
    # is far above this bound; in fact the difference is ~1e-7 (float rounding only).
    step = min(float(model[int(i)].weight_scale.min()) for i in LAYERS)
    diff = float((out - eager).abs().max())
    assert diff <= 2 * step and diff <= 1e-5
    # ...while the quantization itself moves the output far more than that.
    assert float((eager - eager_fp32).abs().max()) > 10 * diff


def test_report_says_which_layers_run_quantized(int4):
    *_, result, _ = int4
    expected = {i: f"int4 weight-only (group {GROUP})" for i in LAYERS}
    assert result.report.quantization == expected
    written = read_report(result.path)["methods"]["forward"]["quantization"]
    assert written == expected


def test_int8_weight_only_through_quantize(tmp_path, monkeypatch):
    torch.manual_seed(0)
    fp32 = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 32)).eval()
    model = quantize(fp32, scheme="int8_weight_only")
    x = torch.randn(2, 64)
    result = export_program(model, (x,), tmp_path / "q8.pte", progress=None)
    (blob_bytes,) = tensorrt_blobs(tmp_path / "q8.pte")
    blob = read_blob(blob_bytes)
    assert sorted(w["dtype"] for w in blob.metadata["weights"]) == ["int8", "int8"]
    dq = [n for n in onnx.load_from_string(blob.onnx).graph.node
          if n.op_type == "DequantizeLinear"]
    assert len(dq) == 2
    assert set(result.report.quantization.values()) == {"int8 weight-only (per channel)"}
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    out = Runtime.get().load_program(tmp_path / "q8.pte").load_method("forward").execute([x])[0]
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


# -- bad input ---------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    ({"scheme": "int4_weight_only", "group_size": 64}, "group size 64 does not divide its 96"),
    ({"scheme": "int4_weight_only", "group_size": 48}, "group size 48 is not one of"),
    ({"scheme": "uint4"}, "no uint4"),
    ({"scheme": "int2_weight_only"}, "no 2-bit"),
    ({"scheme": "int3_weight_only"}, "unknown quantization scheme"),
    ({"scheme": "int8_weight_only", "calibration": [(torch.zeros(1, 96),)]}, "no calibration"),
    ({"scheme": "fp4_w4a4"}, "not implemented"),
    ({"scheme": "int8_w8a8"}, "quantizes activations: pass example_inputs"),
])
def test_bad_quantize_input_is_refused(kwargs, match):
    model = torch.nn.Sequential(torch.nn.Linear(96, 32))
    with pytest.raises(QuantizationError, match=match):
        quantize(model, **kwargs)
    assert isinstance(model[0], torch.nn.Linear)  # the model itself is never changed


def test_a_model_without_linear_is_refused():
    with pytest.raises(QuantizationError, match="no torch.nn.Linear"):
        quantize(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)), scheme="int4_weight_only")


def test_flavour_and_capability_refusals():
    assert refusal("int8_weight_only", "tensorrt_rtx", None) is None
    assert refusal("int4_weight_only", "tensorrt", None) is None
    assert "no INT8 activation" in refusal("int8_w8a8", "tensorrt_rtx", None)
    assert refusal("int8_w8a8", "tensorrt", None) is None
    # TensorRT-RTX's default targets include SM75..SM86: FP8 cannot run on them.
    assert "SM89" in refusal("fp8_w8a8", "tensorrt_rtx", None)
    assert "SM86" in refusal("fp8_w8a8", "tensorrt_rtx", ("SM86", "SM89"))
    assert refusal("fp8_w8a8", "tensorrt_rtx", ("SM89", "SM120")) is None
    assert "SM120" in refusal("fp4_w4a4", "tensorrt_rtx", ("SM89",))


def test_export_refuses_a_scheme_the_flavour_cannot_run(tmp_path):
    torch.manual_seed(0)
    model = quantize(torch.nn.Sequential(torch.nn.Linear(32, 16)), scheme="fp4_w4a4",
                     allow_unquantized=True)
    x = torch.randn(2, 32)
    with pytest.raises(QuantizationError, match="needs compute capability SM120.*"
                                                "allow_unquantized"):
        export_program(model, (x,), tmp_path / "a.pte", progress=None)
    assert not (tmp_path / "a.pte").exists()
    result = export_program(model, (x,), tmp_path / "a.pte", progress=None,
                            allow_unquantized=True)
    (line,) = result.report.quantization.values()
    assert line.startswith("not quantized: fp4_w4a4 needs compute capability SM120")


# -- crafted quantized blobs ---------------------------------------------------

def _named_data(model: torch.nn.Module, blob) -> dict[str, bytes]:
    state = model.state_dict()
    entries = {}
    for w in blob.metadata["weights"]:
        data = state[w["name"]].contiguous().numpy().tobytes()
        assert w["key"] == "etrt." + hashlib.sha256(data).hexdigest()
        entries[w["key"]] = data
    return entries


def _with_onnx(blob, mutate) -> object:
    model = onnx.load_from_string(blob.onnx)
    mutate(model)
    return read_blob(write_blob(blob.engine, blob.metadata, onnx=model.SerializeToString()))


def _first_dq(model: onnx.ModelProto) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == "DequantizeLinear")


def test_crafted_int4_blobs_are_refused_before_any_read(int4):
    _, model, x, _, blob_bytes = int4
    blob = read_blob(blob_bytes)
    entries = _named_data(model, blob)
    executor = create_executor(blob, "onnxruntime", InMemoryNamedData(entries))  # the real one
    executor.close()

    # 1. a weight's recorded byte size that is not ceil(numel / 2)
    meta = json.dumps(blob.metadata, separators=(",", ":")).encode()
    assert b'"nbytes":65536' in meta and blob_bytes.count(b'"nbytes":65536') == 1
    with pytest.raises(BlobError, match="nbytes 65537 is not the size of a int4 tensor"):
        read_blob(blob_bytes.replace(b'"nbytes":65536', b'"nbytes":65537'))

    # 2. named data that holds fewer bytes than the blob records
    short = dict(entries)
    key = next(w["key"] for w in blob.metadata["weights"] if w["dtype"] == "int4")
    short[key] = short[key][:-1]
    with pytest.raises(NamedDataError, match="holds 65535 bytes, but the blob records 65536"):
        create_executor(blob, "onnxruntime", InMemoryNamedData(short))

    # 3. a scale whose shape does not match the weight's blocks
    def wrong_scale(m):
        name = _first_dq(m).input[1]
        init = next(t for t in m.graph.initializer if t.name == name)
        array = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array[:, :-1]), name))

    with pytest.raises(InvalidProgramError, match=r"scale .* has shape \[512, 3\], expected "
                                                  r"\[512, 4\]"):
        create_executor(_with_onnx(blob, wrong_scale), "onnxruntime", InMemoryNamedData(entries))

    # 4. a block size that does not divide the weight, or disagrees with the scale
    def block(size):
        def mutate(m):
            next(a for a in _first_dq(m).attribute if a.name == "block_size").i = size
        return mutate

    with pytest.raises(InvalidProgramError, match="block_size 48 does not divide dimension 1"):
        create_executor(_with_onnx(blob, block(48)), "onnxruntime", InMemoryNamedData(entries))
    with pytest.raises(InvalidProgramError, match=r"expected \[512, 2\]"):
        create_executor(_with_onnx(blob, block(128)), "onnxruntime", InMemoryNamedData(entries))
