"""Vision transformers' chains export as the ops onnxruntime runs fast
(aot/onnx/vision_fusions.py): what the exporter writes for real modules,
what onnxruntime computes from it against eager, what TensorRT-RTX's parser
and builder make of it, and the safe softmax that must stay."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from executorch_tensorrt.aot.onnx.export import export_onnx

SAFE_SOFTMAX_OPS = {"Equal", "Not", "ReduceMax", "Where"}


class SelfAttention(nn.Module):  # ViT's layer: scaled_dot_product_attention, no mask
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 16)

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, -1, 3, 2, 8).permute(2, 0, 3, 1, 4)
        attended = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).reshape(1, -1, 16))


class MaskedAttention(nn.Module):  # the caller's mask may be -inf on whole rows
    def forward(self, q, k, v, mask):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class LinearBatchNorm(nn.Module):  # LeViT's MLPLayerWithBN, then its Hardswish
    def __init__(self):
        super().__init__()
        self.linear, self.norm = nn.Linear(16, 24, bias=False), nn.BatchNorm1d(24)
        with torch.no_grad():  # running statistics a trained model would have
            self.norm.running_mean.uniform_(-1, 1)
            self.norm.running_var.uniform_(0.5, 2)
            self.norm.weight.uniform_(0.5, 2)
            self.norm.bias.uniform_(-1, 1)

    def forward(self, x):
        y = self.norm(self.linear(x).flatten(0, 1)).reshape(x.shape[0], x.shape[1], -1)
        return nn.functional.hardswish(y)


class CosineAttention(nn.Module):  # Swin V2: normalized q and k, x / norm.expand_as(x)
    def forward(self, q, k):
        return nn.functional.normalize(q, dim=-1) @ nn.functional.normalize(k, dim=-1) \
            .transpose(-1, -2)


def _edge(module, args):
    from executorch.exir import EdgeCompileConfig, to_edge

    ep = torch.export.export(module.eval(), args)
    return to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)) \
        .exported_program()


def _masked_inputs():
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    mask = torch.zeros(1, 1, 5, 5)
    mask[..., 2, :] = -torch.inf  # a fully masked row: the safe softmax gives 0
    mask[..., 3, 1:] = -torch.inf
    return q, k, v, mask


# case -> (module, inputs, op counts wanted, ops that must be gone)
CASES = {
    "attention": (SelfAttention, lambda: (torch.randn(1, 6, 16),), {"Softmax": 1},
                  SAFE_SOFTMAX_OPS),
    "linear_batch_norm_hardswish": (LinearBatchNorm, lambda: (torch.randn(2, 7, 16),),
                                    {"HardSwish": 1, "MatMul": 1},
                                    {"BatchNormalization", "Clip", "Div"}),
    "masked_attention": (MaskedAttention, _masked_inputs, {"Softmax": 1, "Where": 1}, set()),
    "cosine_attention": (CosineAttention, lambda: (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)),
                         {"Div": 2}, {"Expand"}),
}


def _export(case):
    make, inputs, _, _ = CASES[case]
    torch.manual_seed(0)
    module, args = make().eval(), inputs()
    return module, args, export_onnx(_edge(module, args), inline_weights=True)


@pytest.mark.parametrize("case", CASES)
def test_a_vision_chain_exports_as_the_fast_ops_and_computes_what_eager_does(case):
    _, _, expected, gone = CASES[case]
    module, args, exported = _export(case)
    model = onnx.load_from_string(exported.onnx_bytes)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert all(ops[op] == n for op, n in expected.items()), ops
    assert not gone & set(ops), ops
    fused = [i for i, n in enumerate(model.graph.node) if n.op_type in expected]
    assert all(i in exported.edge_node_of for i in fused), exported.edge_node_of

    session = ort.InferenceSession(exported.onnx_bytes, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    got = session.run(None, feeds)[0]
    with torch.no_grad():
        want = module(*args).numpy()
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_caller_mask_keeps_the_safe_softmax_so_a_fully_masked_row_stays_zero():
    module, args, exported = _export("masked_attention")
    model = onnx.load_from_string(exported.onnx_bytes)
    assert SAFE_SOFTMAX_OPS <= {n.op_type for n in model.graph.node}
    session = ort.InferenceSession(exported.onnx_bytes, providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})[0]
    assert (got[..., 2, :] == 0).all()  # plain Softmax would give NaN here


@pytest.mark.parametrize("case", ["attention", "linear_batch_norm_hardswish", "cosine_attention"])
def test_tensorrt_parses_and_builds_the_vision_ops(case):
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    from executorch_tensorrt.tensorrt.onnx_parser import unsupported_nodes
    from executorch_tensorrt.tensorrt.options import BuildOptions

    onnx_bytes = _export(case)[2].onnx_bytes
    assert unsupported_nodes(load_tensorrt(), onnx_bytes) == set()
    build_engine(onnx_bytes, BuildOptions(), label=case, progress=None, keep_engine=False)
