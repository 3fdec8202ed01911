"""Shape values crossing partitions, and refusals in TensorRT's own words.
All real: engines built, programs run through executorch.runtime."""
from __future__ import annotations

import torch
from executorch.runtime import Runtime

from executorch_tensorrt.aot.export import export_program


class _ShapeAcrossSplit(torch.nn.Module):
    """Two float regions split by an int32 bitwise_and (which TensorRT's
    parser refuses), both reshaping by the dynamic batch: the second region
    needs the batch size, a shape value, from outside its own ops."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        n = x.shape[0]
        h = self.a(x).reshape(n * 2, 4).reshape(n, 8)
        keep = (h > 0).to(torch.int32) & 1
        return self.b((h * keep.to(h.dtype)).reshape(n * 2, 4)).relu()


def test_partitions_reading_a_shape_value_build_and_run(tmp_path, allow_fallback):
    torch.manual_seed(0)
    model = _ShapeAcrossSplit().eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    result = export_program(model, (torch.randn(3, 8),), tmp_path / "m.pte", progress=None,
                            dynamic_shapes=({0: batch},))
    report = result.reports["forward"]
    elsewhere = {n: report.ops_of[n] for n in set(report.ops_of) - report.nodes_on_tensorrt}
    # Every node but the one the parser refuses is on TensorRT, the size
    # arithmetic included, in the two regions around it.
    assert list(elsewhere.values()) == ["aten.bitwise_and.Scalar"], report.to_table()
    assert len(report.partitions) == 2
    method = Runtime.get().load_program(str(result.path)).load_method("forward")
    for size in (2, 5):
        x = torch.randn(size, 8)
        (got,) = method.execute([x])
        assert got.shape == (size * 2, 4)
        torch.testing.assert_close(got, model(x), atol=1e-5, rtol=1e-5)


class _Uint8Cast(torch.nn.Module):
    def forward(self, x):
        return (x * 10).to(torch.uint8).to(torch.float32) + 1


def test_a_parser_refusal_carries_tensorrt_words(tmp_path):
    result = export_program(_Uint8Cast(), (torch.randn(4, 8),), tmp_path / "u.pte",
                            progress=None, run_check=False)
    report = result.reports["forward"]
    reasons = [r for n, r in report.rejected.items() if n not in report.nodes_on_tensorrt]
    assert len(reasons) == 1, report.to_table()
    assert "UINT8 types for intermediate tensors" in reasons[0], reasons
    assert "UINT8 types for intermediate tensors" in report.to_table()
