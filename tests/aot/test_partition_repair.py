"""One failing region never costs the whole graph, and what exports runs.

The repro is Swin's attention-mask fill: a scalar copied into a slice
(`aten.copy` into `slice_copy`, then `slice_scatter`). torchlib translates
`aten::copy` as CastLike(src, self), which never broadcasts the scalar."""
from __future__ import annotations

import torch
from executorch.exir import to_edge
from executorch.runtime import Runtime
from torch.onnx._internal.exporter import _core, _registration

from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.aot.onnx.edge_tags import tag_edge_nodes
from executorch_tensorrt.aot.onnx.export import export_onnx
from executorch_tensorrt.aot.partition.checks import output_mismatch
from executorch_tensorrt.aot.partition.program import extract_partition
from executorch_tensorrt.aot.onnx.translatable import _register_copy_ops
from executorch_tensorrt.tensorrt.flavor import load_tensorrt


class SliceFill(torch.nn.Module):
    def forward(self, x):
        m = torch.zeros_like(x)
        m[:, 0:3] = 2.0
        return x + m


def run(path, inputs):
    return Runtime.get().load_program(str(path)).load_method("forward").execute(list(inputs))


def test_scalar_slice_fill_runs_in_one_tensorrt_partition(tmp_path, allow_fallback):
    x = torch.randn(2, 8)
    result = export_program(SliceFill(), (x,), tmp_path / "m.pte", progress=None)
    assert len(result.report.partitions) == 1 and not result.report.rejected
    (got,) = run(result.path, (x,))
    assert torch.equal(got, SliceFill()(x))


def test_copy_partition_alone_exports_and_runs(tmp_path, allow_fallback):
    """With slice_scatter excluded, the `copy` becomes a partition whose output is
    the filled slice: it used to export with a 0-d output declared [2, 3] and
    fail at run time in onnxruntime."""
    x = torch.randn(2, 8)
    result = export_program(SliceFill(), (x,), tmp_path / "m.pte", progress=None,
                            exclude_ops={"aten.slice_scatter.default"})
    assert result.report.partitions
    (got,) = run(result.path, (x,))
    assert torch.equal(got, SliceFill()(x))


def _copy_partition():
    ep = to_edge(torch.export.export(SliceFill(), (torch.randn(2, 8),))).exported_program()
    (copy_node,) = [n.name for n in ep.graph.nodes if "copy_default" in n.name]
    return extract_partition(ep, {copy_node})


def test_output_check_catches_torchlibs_copy_translation():
    """The check compares what ONNX and TensorRT compute with the graph's shapes:
    torchlib's own translation (a fresh registry without our override) is caught,
    ours passes."""
    sub = _copy_partition()
    trt = load_tensorrt()
    registry = _registration.ONNXRegistry.from_torchlib()
    _register_copy_ops(registry)
    torchlib = _core.export(tag_edge_nodes(sub), registry=registry, optimize=True,
                            verbose=False).model_proto.SerializeToString()
    reason = output_mismatch(trt, sub, torchlib)
    assert reason is not None and "shape []" in reason and "[2, 3]" in reason, reason
    assert output_mismatch(trt, sub, export_onnx(sub).onnx_bytes) is None
