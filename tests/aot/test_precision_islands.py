"""fp32 islands in fp16 exports, and float64 position math: all on TensorRT,
run through executorch.runtime (the onnxruntime fallback runs the partitions)."""
from __future__ import annotations

import warnings

import torch
from executorch.runtime import Runtime

from executorch_tensorrt.aot.checks.run_check import MethodRunCheck, RunCheck, RunCheckError
from executorch_tensorrt.aot.export import PartitionSplitWarning, export_program
from executorch_tensorrt.aot.partition.float64 import narrow_float64


class _Island(torch.nn.Module):
    """A position term made in float32 on purpose (as a decomposed bicubic
    resize makes it): after the fp16 re-trace it meets fp16 weights in a
    LayerNorm, a concat, an add and a matmul."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.ln = torch.nn.LayerNorm(8)
        self.freq = torch.nn.Parameter(torch.rand(8))
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):  # [1, 12, 8]
        pos = torch.arange(12, dtype=torch.float32)[:, None] * self.freq
        h = self.ln(self.proj(x) + pos.sin())
        return self.fc(torch.cat([h, pos.cos().expand_as(h)], -1)) @ self.proj.weight


class _SineTable(torch.nn.Module):
    """A detection transformer's sine position table: float64, from constants."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):  # [1, 10, 16]
        t = torch.arange(10, dtype=torch.float64)[:, None]
        angle = t / 10000 ** (torch.arange(8, dtype=torch.float64) / 8)
        table = torch.cat([angle.sin(), angle.cos()], -1).to(torch.float32)
        return self.b(self.a(x) + table)


class _Rotary(torch.nn.Module):
    """A diffusion transformer's rotary angles: float64 from position ids,
    cast down to the activations' dtype."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        inv = 1.0 / 10000 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)
        self.register_buffer("inv", inv)

    def forward(self, x, ids):
        angle = ids[..., None].to(torch.float64) * self.inv
        emb = torch.cat([angle, angle], -1)
        return self.fc(x) + emb.cos().to(x.dtype) * emb.sin().float()


class _SampleAtFloatGrid(torch.nn.Module):
    """A deformable attention's sampling: the grid is made in float32 (from a
    fresh position table and `.float()` offsets, as RT-DETR's reference points
    are), the sampled features are fp16 after the re-trace. TensorRT's
    GridSample wants both of one type."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.offsets = torch.nn.Linear(3, 2)

    def forward(self, x):  # [1, 3, 6, 5]
        rows, cols = torch.meshgrid(torch.linspace(-1, 1, 6), torch.linspace(-1, 1, 5),
                                    indexing="ij")
        shift = torch.tanh(self.offsets(x.permute(0, 2, 3, 1))).float()
        grid = torch.stack([cols, rows], -1)[None] + 0.2 * shift
        return torch.nn.functional.grid_sample(self.conv(x), grid, align_corners=False)


def _export(model, inputs, path, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = export_program(model, inputs, path, progress=None, **options)
    splits = [w for w in caught if issubclass(w.category, PartitionSplitWarning)]
    (got,) = Runtime.get().load_program(str(path)).load_method("forward").execute(list(inputs))
    with torch.no_grad():
        want = model(*inputs)
    return result.report, splits, (got - want).abs().max().item(), want.abs().max().item()


def test_fp16_export_keeps_an_fp32_island_on_tensorrt(tmp_path, allow_fallback):
    torch.manual_seed(0)
    report, splits, diff, scale = _export(_Island().eval(), (torch.randn(1, 12, 8),),
                                          tmp_path / "island.pte", precision="fp16")
    assert not report.rejected, report.rejected
    assert len(report.partitions) == 1 and not splits
    assert diff <= 2e-3 * max(1.0, scale), (diff, scale)  # docs/precision.md


def test_fp16_grid_sample_with_an_fp32_grid_is_on_tensorrt(tmp_path, allow_fallback):
    torch.manual_seed(0)
    report, splits, diff, scale = _export(_SampleAtFloatGrid().eval(), (torch.randn(1, 3, 6, 5),),
                                          tmp_path / "sample.pte", precision="fp16")
    assert not report.rejected, report.rejected
    assert len(report.partitions) == 1 and not splits
    assert diff <= 2e-3 * max(1.0, scale), (diff, scale)


def test_a_float64_constant_table_is_folded(tmp_path, allow_fallback):
    torch.manual_seed(0)
    report, splits, diff, scale = _export(_SineTable().eval(), (torch.randn(1, 10, 16),),
                                          tmp_path / "sine.pte")
    assert not report.rejected, report.rejected
    assert len(report.partitions) == 1 and not splits
    assert diff <= 1e-5 * max(1.0, scale)


def test_float64_rotary_math_runs_in_float32_on_tensorrt(tmp_path, allow_fallback):
    torch.manual_seed(0)
    ids = torch.arange(4090, 4100)[None]  # large angles: the worst case for float32
    report, splits, diff, _ = _export(_Rotary().eval(), (torch.randn(1, 10, 16), ids),
                                      tmp_path / "rotary.pte")
    assert not report.rejected, report.rejected
    assert len(report.partitions) == 1 and not splits
    # docs/precision.md: each of cos and sin within |angle| * 2^-23 (+ one rounding).
    assert diff <= 2 * (4100 * 2 ** -23 + 2 ** -24), diff


def test_float64_that_reaches_an_output_stays_float64():
    class Wide(torch.nn.Module):
        def forward(self, ids):
            return (ids.to(torch.float64) * 0.1).sin()

    ep = torch.export.export(Wide(), (torch.arange(4),))
    assert narrow_float64(ep) == 0
    assert ep.module()(torch.arange(4)).dtype == torch.float64


def test_the_run_check_names_a_failure_outside_tensorrt(tmp_path):
    failed = MethodRunCheck("forward", False, "example inputs", "running it: error 0x12",
                            failed_in="outside")
    text = str(RunCheckError(tmp_path / "m.pte", RunCheck((failed,))))
    assert "outside TensorRT" in text and "dim order" in text
    assert "most likely a bug" not in text
