"""Pytree outputs (dicts, nested tuples) and partitioners after ours."""
from __future__ import annotations

import json

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch import nn
from torch.utils import _pytree as pytree

from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
from executorch_tensorrt.program.info import read_program


class DictOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        return {"logits": h, "extra": (h.relu(), {"mean": h.mean(-1)})}


def test_dict_outputs_come_back_as_flattened_leaves(tmp_path, allow_fallback):
    torch.manual_seed(0)
    model, x = DictOutput().eval(), torch.randn(3, 8)
    result = export_program(model, (x,), tmp_path / "m.pte", progress=None)
    got = Runtime.get().load_program(str(result.path)).load_method("forward").execute([x])
    want = pytree.tree_leaves(model(x))
    assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want] == [(3, 4), (3, 4), (3,)]
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-5)
    expected = json.loads(result.expected_path.read_text())
    entries = expected["outputs"] if isinstance(expected, dict) else expected
    assert [e["shape"] for e in entries] == [[3, 4], [3, 4], [3]]


class LinearStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 16)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def _lower(model, x, trt_partitioner):
    ep = torch.export.export(model, (x,))
    edge = to_edge_transform_and_lower(
        ep, partitioner=[trt_partitioner, XnnpackPartitioner()],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.exported_program().graph_module


def _portable_ops(gm) -> set[str]:
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"
            and "executorch_call_delegate" not in str(n.target) and "getitem" not in str(n.target)}


def test_linears_excluded_from_tensorrt_go_whole_to_xnnpack(tmp_path, allow_fallback):
    """ExecuTorch decomposes what the first partitioner does not ask to keep; ours
    asks for what the partitioners after it want (XNNPACK: linear)."""
    torch.manual_seed(0)
    model, x = LinearStack().eval(), torch.randn(4, 32)
    result = export_program(model, (x,), tmp_path / "m.pte", progress=None,
                            exclude_ops={"aten.linear.default"},
                            partitioners=[XnnpackPartitioner()])
    (method,) = read_program(result.path)
    assert sorted(d.backend for d in method.delegates) == [
        "TensorRTBackend", "XnnpackBackend", "XnnpackBackend"]
    assert method.operators == [], method.operators  # no portable addmm / permute left
    got = Runtime.get().load_program(str(result.path)).load_method("forward").execute([x])
    assert torch.allclose(got[0], model(x), atol=1e-5)


def test_without_keep_whole_linear_reaches_xnnpack_decomposed():
    """The control: our partitioner alone, not told about XNNPACK, lets to_edge
    decompose linear; XNNPACK then never sees a linear."""
    torch.manual_seed(0)
    model, x = LinearStack().eval(), torch.randn(4, 32)
    told = _lower(model, x, TensorRTPartitioner(exclude_ops={"aten.linear.default"},
                                                progress=None,
                                                keep_whole=[XnnpackPartitioner()]))
    untold = TensorRTPartitioner(exclude_ops={"aten.linear.default"}, progress=None)
    assert untold.ops_to_not_decompose(None) == ([], None)
    assert _portable_ops(told) == set()
    gm = _lower(model, x, untold)
    ops = _portable_ops(gm) | {str(n.target) for sub in gm.children()
                               for n in getattr(sub, "graph", torch.fx.Graph()).nodes}
    assert not any("linear" in op for op in ops), ops


def test_tensorrt_keeps_linear_whole_when_not_excluded():
    ops, keep = TensorRTPartitioner(progress=None).ops_to_not_decompose(None)
    assert ops == [torch.ops.aten.linear.default] and keep is not None
