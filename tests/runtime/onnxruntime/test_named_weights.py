"""Weights that onnxruntime's transpose optimizer re-lays out.

A weight added after a layout Transpose (`permute(conv(x)) + pos`, the
ViTDet/SAM position embedding) and permuted back: onnxruntime pushes the
Transpose through the Add by transposing `pos` (and reshaping a rank-1 scale)
under the same name, so a weight given in place (AddInitializer) kept its old
layout and every fallback call failed or, with square dims, computed wrong
numbers. Exported for real, run through executorch.runtime with the fallback,
compared with eager; the square case checks numbers, not just that it runs.
The matrices (Conv weights) must still be read in place."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import tensorrt_blobs
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.runtime.onnxruntime.named_weights import layout_movable


class PosEmbed(torch.nn.Module):
    """conv -> NHWC -> * scale[C] + pos[1,H,W,C] -> NCHW -> conv."""

    def __init__(self, channels: int):
        super().__init__()
        torch.manual_seed(0)
        self.patch = torch.nn.Conv2d(3, channels, 4, 4)
        self.scale = torch.nn.Parameter(torch.rand(channels) + 0.5)
        self.pos = torch.nn.Parameter(torch.randn(1, 8, 8, channels))
        self.head = torch.nn.Conv2d(channels, 4, 1)

    def forward(self, x):
        y = self.patch(x).permute(0, 2, 3, 1) * self.scale + self.pos
        return self.head(y.permute(0, 3, 1, 2))


X = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module", params=[256, 8], ids=["broadcast-fails", "square-dims"])
def exported(request, tmp_path_factory):
    model = PosEmbed(request.param).eval()
    pte = tmp_path_factory.mktemp("layout") / "m.pte"
    result = export_program(model, (X,), str(pte), progress=None, external_weights=True)
    assert result.backends == {"forward": ["TensorRTBackend"]}  # all of it in one partition
    assert result.run_check.ok, result.run_check.describe()  # export ran it (issue 21)
    with torch.no_grad():
        return pte, model(X).numpy()


def test_weight_after_a_layout_transpose_matches_eager(exported, allow_fallback):
    import executorch_tensorrt  # noqa: F401 - registers TensorRTBackend
    from executorch.runtime import Runtime

    pte, want = exported
    method = Runtime.get().load_program(str(pte), data_path=str(pte.with_suffix(".ptd"))) \
        .load_method("forward")
    for _ in range(2):
        np.testing.assert_allclose(method.execute([X])[0].numpy(), want, rtol=1e-4, atol=1e-4)


def test_only_the_elementwise_weights_are_copied(exported):
    blob = read_blob(tensorrt_blobs(exported[0])[0])
    names = {w["name"] for w in blob.weights}  # the named-data ones (>= 1 KiB)
    assert {"pos", "patch.weight"} <= names
    # scale (a named weight only at 256 channels) and pos feed Mul/Add; the
    # Conv weights and biases stay in place.
    assert layout_movable(blob.onnx, sorted(names)) == names & {"pos", "scale"}
