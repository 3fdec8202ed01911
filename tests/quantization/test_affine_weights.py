"""Affine (asymmetric) weights: a checkpoint's codes with zero points or float
offsets (PackedWeight), and asymmetric torchao / PT2E weights, lowered onto
TensorRT's symmetric int4/int8 weight-only GEMM plus a group-sum correction
(formats/affine.py). Tiny llamas whose every Linear is a PackedLinear with
random codes export through llm.export fully on TensorRT (the partition check
builds their engines with TensorRT-RTX), run in ExecuTorch through the
onnxruntime fallback, and match eager over the dequantized weights; the
program stores the codes once, packed."""
from __future__ import annotations

import copy

import pytest
import torch
from executorch.exir._serialize._program import deserialize_pte_binary

from executorch_tensorrt import llm
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.quantization.packed_linear import PackedLinear
from executorch_tensorrt.quantization.packed_weight import PackedWeight
from tests.helpers import tensorrt_blobs

VOCAB = 96
CONFIG = dict(model_type="llama", vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
              num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64, bos_token_id=VOCAB - 2, eos_token_id=VOCAB - 1)
MAX_SEQ, MAX_CONTEXT, NEW = 4, 32, 8
PROMPT = [5, 17, 3, 40, 22, 9]


def random_packed(name: str, out: int, inp: int, bits: int, group: int, *, zero: bool = True,
                  offsets: bool = False, order: bool = False, seed: int = 0) -> PackedWeight:
    """Random codes, scales, zero points / offsets and input order of a PackedWeight."""
    g = torch.Generator().manual_seed(seed)
    groups = inp // group
    codes = torch.randint(0, 256, (out, inp * bits // 8), generator=g, dtype=torch.uint8)
    # Weights of llama's initializer range: steps of ~0.005 over 16 codes, 0.0003 over 256.
    step = 0.08 / 2 ** bits
    scales = torch.rand(out, groups, generator=g) * step + step / 2
    zeros = (torch.randint(0, 2 ** bits, (out, groups), generator=g, dtype=torch.uint8)
             if zero else None)
    offs = torch.randn(out, groups, generator=g) * 0.02 - 0.04 if offsets else None
    perm = torch.randperm(inp, generator=g) if order else None
    return PackedWeight(name, bits, out, inp, group, codes, scales, zeros, offs, perm)


def with_packed_linears(model: torch.nn.Module, form) -> torch.nn.Module:
    """Every nn.Linear of `model` replaced (in place) by a PackedLinear of
    `form(name, linear)` -> random_packed keywords."""
    targets = [(parent, child_name, f"{parent_name}.{child_name}".lstrip("."), child)
               for parent_name, parent in model.named_modules()
               for child_name, child in parent.named_children()
               if isinstance(child, torch.nn.Linear)]
    for i, (parent, child_name, full, linear) in enumerate(targets):
        weight = random_packed(full, linear.out_features, linear.in_features, seed=i,
                               **form(full))
        setattr(parent, child_name, PackedLinear(weight))
    return model


def dequantized(model: torch.nn.Module) -> torch.nn.Module:
    """A copy whose PackedLinears are float Linears over PackedWeight.dequantize()."""
    result = copy.deepcopy(model)
    for parent in list(result.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, PackedLinear):
                linear = torch.nn.Linear(child.in_features, child.out_features, bias=False)
                linear.weight.data = child.packed.dequantize()
                setattr(parent, child_name, linear)
    return result


def _form(name: str) -> dict:
    """Every form in one decoder layer: int4 with zero points (GPTQ/AWQ), with
    offsets (GGUF's minimums), with both; GPTQ's act-order (input orders); int8
    per channel and per group."""
    if name.endswith(("v_proj", "o_proj")):
        return dict(bits=4, group=32, zero=False, offsets=True, order=True)
    if name.endswith("up_proj"):
        return dict(bits=4, group=32, zero=True, offsets=True)
    if name.endswith("gate_proj"):
        return dict(bits=8, group=64, zero=True, order=True)  # per channel (64 inputs)
    if name.endswith("down_proj"):
        return dict(bits=8, group=32, zero=False, offsets=True, order=True)
    return dict(bits=4, group=32)  # q_proj, k_proj, lm_head: zero points


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One export covers every form (one decoder layer): the suite's time is short."""
    model = with_packed_linears(llm.causal_lm(CONFIG), _form)
    out = tmp_path_factory.mktemp("affine") / "model.pte"
    result = llm.export(model, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT, output=out,
                        progress=None)
    return model, result


def test_every_linear_runs_on_tensorrt_as_an_affine_weight(exported):
    model, result = exported
    report = result.export.report
    assert result.export.backends["forward"] == ["TensorRTBackend"]
    assert not report.rejected, report.main_reasons()
    packed = {n for n, m in model.named_modules() if isinstance(m, PackedLinear)}
    assert len(packed) == 7 + 1  # q, k, v, o, gate, up, down, and the head
    lines = result.export.report.quantization
    assert set(lines) == packed
    assert all(" affine weight-only (" in line for line in lines.values())
    layer = "model.layers.0."
    assert lines[layer + "self_attn.q_proj"] == "int4 affine weight-only (group 32, zero points)"
    assert lines[layer + "self_attn.v_proj"] == (
        "int4 affine weight-only (group 32, offsets, input order)")
    assert lines[layer + "mlp.up_proj"] == (
        "int4 affine weight-only (group 32, zero points and offsets)")
    assert lines[layer + "mlp.gate_proj"] == (
        "int8 affine weight-only (per channel, zero points, input order)")
    assert lines[layer + "mlp.down_proj"] == (
        "int8 affine weight-only (group 32, offsets, input order)")
    # The run check compared the written program with the eager model.
    [check] = [m for m in result.export.run_check.methods if m.method == "forward"]
    assert check.ok and check.compared


def test_logits_and_greedy_tokens_equal_eager_over_the_dequantized_weights(exported,
                                                                             allow_fallback):
    from executorch.runtime import Runtime

    model, result = exported
    method = Runtime.get().load_program(str(result.path)).load_method("forward")
    got = greedy_decode(method, PROMPT, NEW, limits=result.metadata)
    reference = dequantized(model).eval()
    want = greedy_decode(llm.eager_decoder(reference, MAX_CONTEXT), PROMPT, NEW,
                         limits=result.metadata)
    assert got.tokens == want.tokens
    assert len(set(want.tokens)) > 1  # a real sequence, not one repeated token
    for a, b in zip(got.logits, want.logits):
        scale = float(b.abs().max())
        torch.testing.assert_close(a, b, atol=2e-5 * max(1.0, scale), rtol=1e-4)
    # The quantized weights matter: a model with other random codes decodes otherwise.
    assert float(want.logits[0].abs().max()) > 0


def test_named_data_holds_each_layers_codes_once_packed(exported):
    model, result = exported
    named = deserialize_pte_binary(result.path.read_bytes()).named_data
    stored = [named.buffers[e.buffer_index] for e in named.pte_data.values()]
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    for module in packed:
        # The codes signed (u - 2**(bits-1): the same bytes XOR 0x88 / 0x80).
        recoded = module.packed.signed_codes().numpy().tobytes()
        assert sum(b == recoded for b in stored) == 1, module.packed.name
    # No float weight: besides the codes and the model's own float tensors
    # (embedding, norms), each entry is per group or per input feature (scales,
    # group corrections, input orders), far smaller than any layer's weight.
    model_tensors = {t.contiguous().numpy().tobytes() for n, t in model.state_dict().items()
                     if not any(n.startswith(p.packed.name + ".") for p in packed)}
    codes = {m.packed.signed_codes().numpy().tobytes() for m in packed}
    rest = [b for b in stored if b not in codes and b not in model_tensors]
    largest_per_group = max(max(m.out_features * m.packed.scales.shape[1] * 4, m.in_features * 8)
                            for m in packed)
    assert rest and max(len(b) for b in rest) <= largest_per_group
    assert largest_per_group * 8 <= min(m.in_features * m.out_features * 4 for m in packed)


# -- asymmetric torchao and PT2E weights, through the same lowering -----------

def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 64)).eval()


def _export_and_run(model, x, path):
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot.export import export_program

    result = export_program(model, (x,), path, progress=None)
    assert result.backends["forward"] == ["TensorRTBackend"]
    assert not result.report.rejected, result.report.main_reasons()
    out = Runtime.get().load_program(str(path)).load_method("forward").execute([x])[0]
    (blob,) = [read_blob(b) for b in tensorrt_blobs(path)]
    stored = {w["name"]: (w["dtype"], w["shape"]) for w in blob.metadata["weights"]}
    return result, out, stored


def _assert_exact(out: torch.Tensor, want: torch.Tensor) -> None:
    """Equal within float rounding of the output's magnitude (not a quantization step)."""
    torch.testing.assert_close(out, want, atol=1e-6 * float(want.abs().max()), rtol=1e-5)


def test_asymmetric_torchao_weights_export_exactly(tmp_path, allow_fallback):
    import torchao.quantization as ao
    from torchao.quantization.quant_primitives import MappingType

    model = _mlp()
    ao.quantize_(model, ao.IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                                granularity=ao.PerGroup(32),
                                                mapping_type=MappingType.ASYMMETRIC),
                 filter_fn=lambda _m, name: name == "0")
    ao.quantize_(model, ao.IntxWeightOnlyConfig(weight_dtype=torch.int8,
                                                granularity=ao.PerAxis(0),
                                                mapping_type=MappingType.ASYMMETRIC),
                 filter_fn=lambda _m, name: name == "2")
    assert all(bool(torch.any(model[i].weight.zero_point != 0)) for i in (0, 2))
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(1))
    result, out, stored = _export_and_run(model, x, tmp_path / "torchao.pte")
    assert result.report.quantization == {
        "0": "int4 affine weight-only (group 32, zero points)",
        "2": "int8 affine weight-only (per channel, zero points)"}
    assert stored["0.qweight"] == ("int4", [256, 128])
    assert stored["2.qweight"] == ("int8", [64, 256])
    assert not [n for n, (dtype, shape) in stored.items()
                if dtype.startswith("float") and len(shape) == 2 and shape[1] >= 128]
    with torch.no_grad():
        _assert_exact(out, model(x))  # torchao's own dequantized weights


class _AffineWeightQuantizer:
    """PT2E weight-only per-channel affine specs: unsigned 4-bit codes [0, 15]
    on the first Linear, uint8 [0, 255] on the second (zero points != 0)."""

    def __new__(cls):
        from torchao.quantization.pt2e.observer import PerChannelMinMaxObserver
        from torchao.quantization.pt2e.quantizer import (QuantizationAnnotation,
                                                         QuantizationSpec, Quantizer)

        class AffineWeights(Quantizer):
            def annotate(self, model):
                linears = [n for n in model.graph.nodes
                           if n.target == torch.ops.aten.linear.default]
                for node, high in zip(linears, (15, 255)):
                    spec = QuantizationSpec(dtype=torch.uint8, quant_min=0, quant_max=high,
                                            qscheme=torch.per_channel_affine, ch_axis=0,
                                            observer_or_fake_quant_ctr=PerChannelMinMaxObserver)
                    node.meta["quantization_annotation"] = QuantizationAnnotation(
                        input_qspec_map={node.args[1]: spec}, _annotated=True)
                return model

            def validate(self, model):
                pass

        return AffineWeights()


def test_asymmetric_pt2e_weights_export_exactly(tmp_path, allow_fallback):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(1))
    prepared = prepare_pt2e(torch.export.export(_mlp(), (x,)).module(), _AffineWeightQuantizer())
    prepared(x)
    gm = convert_pt2e(prepared)
    result, out, stored = _export_and_run(gm, x, tmp_path / "pt2e.pte")
    assert result.report.quantization == {
        "0": "int4 affine weight-only (per channel, zero points)",
        "2": "int8 affine weight-only (per channel, zero points)"}
    assert sorted(dtype for dtype, shape in stored.values() if len(shape) == 2
                  and shape[1] >= 128) == ["int4", "int8"]
    with torch.no_grad():
        _assert_exact(out, gm(x))  # PT2E's own dequantize_per_channel


def test_export_takes_packed_linears_with_float16_scales_in_a_float32_model(tmp_path,
                                                                            allow_fallback):
    """executorch_tensorrt's export finds PackedLinears too; GPTQ/AWQ checkpoints
    store float16 scales, which a float32 model's lowered layers take as float32
    (exact) to compute in float32."""
    from executorch_tensorrt.quantization.importers.packed import lower_packed

    first = random_packed("0", 64, 128, 4, 32)
    first = PackedWeight("0", 4, 64, 128, 32, first.codes, first.scales.to(torch.float16),
                         first.zero_points, bias=torch.randn(64))
    second = random_packed("2", 32, 64, 8, 64, zero=True, offsets=True, order=True, seed=1)
    model = torch.nn.Sequential(PackedLinear(first), torch.nn.LayerNorm(64),
                                PackedLinear(second)).eval()
    assert lower_packed(model)[0].weight_scale.dtype == torch.float32
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(1))
    result, out, stored = _export_and_run(model, x, tmp_path / "packed.pte")
    assert result.report.quantization == {
        "0": "int4 affine weight-only (group 32, zero points)",
        "2": "int8 affine weight-only (per channel, zero points and offsets, input order)"}
    assert stored["0.qweight"] == ("int4", [64, 128]) and stored["2.qweight"] == ("int8", [32, 64])
    with torch.no_grad():
        want = model[2](model[1](x @ first.dequantize().T + first.bias))
        _assert_exact(out, want)
