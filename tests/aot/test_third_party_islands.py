"""A third-party model of a kind that used to fall partly to ExecuTorch, from a
tiny transformers config with random weights: a ViT run at another resolution
than its config in fp16 (a float32 island where its position embedding is
resized). Without the casts where dtypes meet, half its encoder left TensorRT
and the written program failed to run; now it is one partition with every
node on TensorRT and matches eager through executorch.runtime."""
from __future__ import annotations

import torch
import transformers

from executorch_tensorrt.aot.export import export_program


class _Vit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64)
        torch.manual_seed(0)
        self.vit = transformers.ViTModel(config).eval()

    def forward(self, x):
        return self.vit(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state


def _all_on_tensorrt(result) -> None:
    report = result.report
    assert not report.rejected, sorted({report.ops_of.get(n, n) for n in report.rejected})
    assert len(report.partitions) == 1
    (method,) = result.run_check.methods
    assert method.ok and method.compared, result.run_check.describe()


def test_vit_at_another_resolution_in_fp16_is_one_tensorrt_partition(tmp_path, allow_fallback):
    x = torch.randn(1, 3, 48, 48, generator=torch.Generator().manual_seed(1))
    _all_on_tensorrt(export_program(_Vit(), (x,), tmp_path / "vit.pte", precision="fp16",
                                    progress=None))

