"""quantize(scheme="fp4_weight_only"): NVFP4 weights (E2M1 packed two per
byte, FP8 E4M3 block scales, a float32 per-tensor scale), exported for SM120
with TensorRT-RTX's CPU builder building the engine, two chained
DequantizeLinear in the ONNX, the onnxruntime fallback (which rewrites
FLOAT4E2M1 into float16 values and a Mul) compared with the eager quantized
model; SM89 refused unless allowed to run float; crafted blobs refused."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import executorch_tensorrt  # noqa: F401 - registers the backend
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.blob.format import BlobError
from executorch_tensorrt.errors import InvalidProgramError, NamedDataError
from executorch_tensorrt.quantization import QuantizationError, quantize
from executorch_tensorrt.quantization.formats.fp4 import (BLOCK, e2m1_values, quantize_fp4,
                                                          round_to_e2m1)
from executorch_tensorrt.runtime.choose import create_executor
from executorch_tensorrt.runtime.named_data import InMemoryNamedData
from tests.helpers import FALLBACK, artifact_bytes, run_forward, tensorrt_blobs

SM120 = ("SM120",)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 64)).eval()


def _fp32_weight_bytes(model) -> int:
    return sum(model[i].weight.numel() * 4 for i in (0, 2))


def _close(out: torch.Tensor, eager: torch.Tensor) -> float:
    """The largest difference relative to the output's magnitude."""
    return float((out - eager).abs().max()) / float(eager.abs().max())


@pytest.fixture(scope="module")
def fp4(tmp_path_factory):
    """The fp4 MLP exported once for SM120 (weights in a .ptd), its blob and inputs."""
    tmp = tmp_path_factory.mktemp("fp4")
    fp32 = _mlp()
    model = quantize(fp32, scheme="fp4_weight_only")
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    result = export_program(model, (x,), tmp / "q.pte", external_weights=True, progress=None,
                            compute_capabilities=SM120)
    (blob_bytes,) = tensorrt_blobs(tmp / "q.pte")
    return fp32, model, x, result, blob_bytes


# -- E2M1 rounding and packing ---------------------------------------------------

def test_e2m1_rounding_ties_to_even_and_saturates():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0,   # ties: to the even code
                      0.26, 1.26, 4.9, 5.1,                    # just off a tie
                      6.0, 6.5, 1e30,                          # the largest value; saturation
                      -0.75, -5.0, -7.0, -0.1, 0.0])
    assert e2m1_values(round_to_e2m1(x)).tolist() == [
        0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0,
        0.5, 1.5, 4.0, 6.0,
        6.0, 6.0, 6.0,
        -1.0, -4.0, -6.0, 0.0, 0.0]
    every = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])  # each value maps to itself
    assert e2m1_values(round_to_e2m1(torch.cat([every, -every[1:]]))).tolist() == \
        [*every.tolist(), *(-every[1:]).tolist()]
    with pytest.raises(QuantizationError, match="NaN or infinite"):
        round_to_e2m1(torch.tensor([1.0, float("nan")]))


def test_quantize_fp4_packs_low_nibble_first_with_two_level_scales():
    torch.manual_seed(0)
    w = torch.randn(8, 64)
    packed, block_scale, global_scale = quantize_fp4(w)
    assert (packed.shape, packed.dtype) == ((8, 32), torch.uint8)
    assert (block_scale.shape, block_scale.dtype) == ((8, 64 // BLOCK), torch.float8_e4m3fn)
    assert float(global_scale) == pytest.approx(float(w.abs().max()) / (6 * 448))
    # Element 2j in the low nibble: ONNX's own FLOAT4E2M1 reading gives the same values.
    tensor = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT4E2M1, [8, 64],
                                     packed.numpy().tobytes(), raw=True)
    onnx_values = numpy_helper.to_array(tensor).astype(np.float32)
    codes = round_to_e2m1(w.reshape(8, 4, BLOCK) / (block_scale.float() * global_scale)
                          .unsqueeze(-1)).reshape(8, 64)
    np.testing.assert_array_equal(onnx_values, e2m1_values(codes).numpy())
    # The largest block reaches FP8's largest scale, its largest weight E2M1's 6.
    assert float(block_scale.float().max()) == 448.0
    assert float(np.abs(onnx_values).max()) == 6.0


# -- export, storage, fallback -------------------------------------------------------

def test_fp4_weights_are_stored_packed_and_dequantized_in_two_levels(fp4):
    fp32, model, x, result, blob_bytes = fp4
    blob = read_blob(blob_bytes)
    packed = [w for w in blob.metadata["weights"] if w["dtype"] == "float4_e2m1"]
    assert [w["shape"] for w in packed] == [[512, 256], [64, 512]]
    assert [w["nbytes"] for w in packed] == [512 * 256 // 2, 64 * 512 // 2]
    graph_model = onnx.load_from_string(blob.onnx)
    assert {o.domain: o.version for o in graph_model.opset_import}[""] >= 23
    assert graph_model.ir_version >= 11
    inits = {t.name: t for t in graph_model.graph.initializer}
    produced = {o: n for n in graph_model.graph.node for o in n.output}
    weights_dq = [n for n in graph_model.graph.node if n.op_type == "DequantizeLinear"
                  and inits[n.input[0]].data_type == onnx.TensorProto.FLOAT4E2M1]
    assert {n.input[0] for n in weights_dq} == {w["name"] for w in packed}
    for node in weights_dq:
        assert {a.name: a.i for a in node.attribute} == {"axis": 1, "block_size": BLOCK}
        scales = produced[node.input[1]]  # the fp8 block scales, dequantized
        assert scales.op_type == "DequantizeLinear"
        block = inits[scales.input[0]]
        assert block.data_type == onnx.TensorProto.FLOAT8E4M3FN
        out, cols = inits[node.input[0]].dims
        assert list(block.dims) == [out, cols // BLOCK]
        assert list(inits[scales.input[1]].dims) == []
    ratio = artifact_bytes(result) / _fp32_weight_bytes(fp32)
    # packed E2M1 0.125 + fp8 block scales 1/64, the biases and the program's fixed bytes
    assert 0.125 + 1 / 64 < ratio <= 0.16, ratio
    assert set(result.report.quantization.values()) == {"fp4 weight-only (NVFP4, block 16)"}


def test_fp4_fallback_matches_the_eager_quantized_model(fp4, monkeypatch):
    fp32, model, x, result, _ = fp4
    for key, value in FALLBACK.items():
        monkeypatch.setenv(key, value)
    out = run_forward(result, x)
    with torch.no_grad():
        eager, eager_fp32 = model(x), fp32(x)
    assert _close(out, eager) <= 1e-5
    # ...while FP4 itself moves the output far more than that.
    assert _close(eager, eager_fp32) > 1e-2


def test_the_fallback_frees_its_float16_copies_once_onnxruntime_holds_them(fp4, monkeypatch):
    """onnxruntime folds the decoded fp4 weights into float32 constants of its
    own when it builds the session, so the fallback frees its own float16
    copies then: poisoned with NaN just before, the outputs stay equal to eager."""
    from executorch_tensorrt.runtime.onnxruntime.named_weights import OrtNamedWeights

    fp32, model, x, result, _ = fp4
    freed = []
    release = OrtNamedWeights.release_decoded_fp4

    def poisoned(self):
        for array in self._owned.values():
            array.fill(np.nan)
        freed.append(release(self))
        return freed[-1]

    monkeypatch.setattr(OrtNamedWeights, "release_decoded_fp4", poisoned)
    for key, value in FALLBACK.items():
        monkeypatch.setenv(key, value)
    out = run_forward(result, x)
    assert freed == [(512 * 256 + 64 * 512) * 2]  # both weights' float16 values
    assert _close(out, model(x)) <= 1e-5


def test_fp4_engine_is_built_and_smaller_than_the_fp32_engine(tmp_path):
    fp32 = _mlp()
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    sizes = {}
    for scheme, model in (("fp32", fp32), ("fp4", quantize(fp32, scheme="fp4_weight_only"))):
        # Inline weights: the blob carries the engine TensorRT-RTX's CPU builder
        # built; the run check runs the fp4 program's inline FLOAT4E2M1 on the fallback.
        path = tmp_path / f"{scheme}.pte"
        export_program(model, (x,), path, inline_weights=True, progress=None,
                       compute_capabilities=SM120, run_check=scheme == "fp4")
        (blob,) = [read_blob(b) for b in tensorrt_blobs(path)]
        assert blob.engine, f"{scheme}: no engine in the blob"
        sizes[scheme] = len(blob.engine)
    assert sizes["fp4"] < sizes["fp32"], sizes


def test_the_runtime_builds_the_fp4_engine_from_named_data_for_sm120_only(fp4, tmp_path):
    """`prepare` builds what a first load on the target builds: the engine from
    the embedded ONNX and the packed named-data weights (TensorRT-RTX's CPU
    builder). For SM89 TensorRT itself refuses, naming fp4_e2m1."""
    from tests.helpers import cli_main

    *_, result, _ = fp4
    code, _, stderr = cli_main("prepare", result.path, "--target", "SM120",
                               "--cache", tmp_path / "sm120")
    assert code == 0, stderr
    (engine,) = (tmp_path / "sm120").glob("*.engine")
    assert engine.stat().st_size > 0
    code, _, stderr = cli_main("prepare", result.path, "--target", "SM89",
                               "--cache", tmp_path / "sm89")
    assert code != 0 and "fp4_e2m1" in stderr, stderr
    assert not list((tmp_path / "sm89").glob("*.engine"))


def test_export_for_sm89_is_refused_unless_allowed_to_run_float(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = quantize(torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                         torch.nn.Linear(32, 16)).eval(),
                     scheme="fp4_weight_only")
    x = torch.randn(2, 64)
    with pytest.raises(QuantizationError, match="fp4_weight_only needs compute capability "
                                                "SM120.*SM89.*allow_unquantized"):
        export_program(model, (x,), tmp_path / "a.pte", progress=None,
                       compute_capabilities=("SM89",))
    assert not (tmp_path / "a.pte").exists()
    result = export_program(model, (x,), tmp_path / "a.pte", progress=None,
                            compute_capabilities=("SM89",), allow_unquantized=True)
    assert set(result.report.quantization) == {"0", "2"}
    for line in result.report.quantization.values():
        assert line.startswith("not quantized: fp4_weight_only needs compute capability SM120")
    (blob_bytes,) = tensorrt_blobs(result.path)
    assert {w["dtype"] for w in read_blob(blob_bytes).metadata["weights"]} <= {"float32"}
    for key, value in FALLBACK.items():
        monkeypatch.setenv(key, value)
    from executorch.runtime import Runtime
    out = Runtime.get().load_program(result.path).load_method("forward").execute([x])[0]
    assert _close(out, model(x)) <= 1e-5  # float over the same dequantized weights


@pytest.mark.parametrize("precision, onnx_type", [("fp16", onnx.TensorProto.FLOAT16),
                                                 ("bf16", onnx.TensorProto.BFLOAT16)])
def test_fp4_exports_at_reduced_precision(tmp_path, precision, onnx_type):
    """An fp16/bf16 export re-traces the model after module.to(dtype), which
    would convert float8 buffers: the block scales travel as their uint8 bits,
    so TensorRT still takes the fp4 layers (the run check runs the program)."""
    torch.manual_seed(0)
    model = quantize(torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                         torch.nn.Linear(32, 16)).eval(),
                     scheme="fp4_weight_only")
    result = export_program(model, (torch.randn(2, 64),), tmp_path / "h.pte", progress=None,
                            compute_capabilities=SM120, precision=precision)
    (blob_bytes,) = tensorrt_blobs(result.path)
    graph = onnx.load_from_string(read_blob(blob_bytes).onnx).graph
    types = {t.name: t.data_type for t in graph.initializer}
    block_scales = [n for n in graph.node if n.op_type == "DequantizeLinear"
                    and types.get(n.input[0]) == onnx.TensorProto.FLOAT8E4M3FN]
    assert len(block_scales) == 2
    for node in block_scales:
        assert types[node.input[1]] == onnx_type  # the global scale, in the export's precision
    assert sorted(types.values()).count(onnx.TensorProto.FLOAT4E2M1) == 2
    assert set(result.report.quantization.values()) == {"fp4 weight-only (NVFP4, block 16)"}


@pytest.mark.parametrize("make, match", [
    (lambda: torch.nn.Linear(40, 8), "block size 16 does not divide its 40 input features"),
    (lambda: torch.nn.Linear(32, 8).requires_grad_(False).apply(
        lambda m: m.weight.fill_(float("inf"))), "NaN or infinite"),
])
def test_bad_fp4_input_is_refused(make, match):
    model = torch.nn.Sequential(make())
    with pytest.raises(QuantizationError, match=match):
        quantize(model, scheme="fp4_weight_only")
    assert isinstance(model[0], torch.nn.Linear)


# -- crafted blobs -------------------------------------------------------------------

def _named_data(model: torch.nn.Module, blob) -> dict[str, bytes]:
    state = model.state_dict()
    entries = {}
    for w in blob.metadata["weights"]:
        data = state[w["name"]].contiguous().numpy().tobytes()
        assert w["key"] == "etrt." + hashlib.sha256(data).hexdigest()
        entries[w["key"]] = data
    return entries


def _with_onnx(blob, mutate):
    model = onnx.load_from_string(blob.onnx)
    mutate(model)
    return read_blob(write_blob(blob.engine, blob.metadata, onnx=model.SerializeToString()))


def _block_scales(model: onnx.ModelProto) -> onnx.TensorProto:
    """The first layer's fp8 block scales [512, 256 / 16]."""
    return next(t for t in model.graph.initializer
                if t.data_type == onnx.TensorProto.FLOAT8E4M3FN and list(t.dims) == [512, 16])


def test_crafted_fp4_blobs_are_refused_before_any_read(fp4):
    _, model, x, _, blob_bytes = fp4
    blob = read_blob(blob_bytes)
    entries = _named_data(model, blob)
    executor = create_executor(blob, "onnxruntime", InMemoryNamedData(entries))  # the real one
    executor.close()

    # 1. a packed weight's recorded byte size that is not ceil(numel / 2)
    meta = json.dumps(blob.metadata, separators=(",", ":")).encode()
    assert meta.count(b'"nbytes":65536') == 1 and blob_bytes.count(b'"nbytes":65536') == 1
    with pytest.raises(BlobError, match="nbytes 65537 is not the size of a float4_e2m1 tensor"):
        read_blob(blob_bytes.replace(b'"nbytes":65536', b'"nbytes":65537'))

    # 2. named data holding fewer packed bytes than the blob records
    short = dict(entries)
    key = next(w["key"] for w in blob.metadata["weights"] if w["dtype"] == "float4_e2m1")
    short[key] = short[key][:-1]
    with pytest.raises(NamedDataError, match="holds 65535 bytes, but the blob records 65536"):
        create_executor(blob, "onnxruntime", InMemoryNamedData(short))

    # 3. fp8 block scales of the wrong shape
    def fewer_blocks(m):
        t = _block_scales(m)
        t.dims[1] -= 1
        t.raw_data = t.raw_data[:t.dims[0] * t.dims[1]]

    with pytest.raises(InvalidProgramError, match=r"block scales .* \[512, 15\], expected a "
                                                  r"constant FLOAT8E4M3FN \[512, 16\]"):
        create_executor(_with_onnx(blob, fewer_blocks), "onnxruntime",
                        InMemoryNamedData(entries))

    # 4. block scales that are float32, not fp8
    def float_blocks(m):
        t = _block_scales(m)
        array = np.ones(list(t.dims), dtype=np.float32)
        t.CopyFrom(numpy_helper.from_array(array, t.name))

    with pytest.raises(InvalidProgramError, match="expected a constant FLOAT8E4M3FN"):
        create_executor(_with_onnx(blob, float_blocks), "onnxruntime",
                        InMemoryNamedData(entries))

    # 5. an FP4 weight dequantized per tensor rather than by blocks
    def no_blocks(m):
        node = next(n for n in m.graph.node if any(a.name == "block_size" for a in n.attribute))
        next(a for a in node.attribute if a.name == "block_size").i = 0

    with pytest.raises(InvalidProgramError, match="block_size 0, but an FP4 weight is "
                                                  "dequantized by blocks"):
        create_executor(_with_onnx(blob, no_blocks), "onnxruntime", InMemoryNamedData(entries))
