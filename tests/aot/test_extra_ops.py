"""Forms TensorRT took nothing of before aot/onnx/extra_ops.py, in one program:
exported with the partitioner (every node must be on TensorRT: the check build
is a real TensorRT-RTX engine build), run through ExecuTorch's runtime with the
onnxruntime fallback, and compared with eager. Cases the backend suite does
not have: repeated indices under index_put(accumulate=True), which must add
up, 2-D adaptive max pooling's indices at sizes that do not divide, and the
mean of an integer tensor as float (the suite's one failure before)."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import executorch_tensorrt


class ExtraOps(torch.nn.Module):
    def forward(self, image, x, rows, values, volume, counts):
        pooled, where = F.adaptive_max_pool2d(image, (3, 2), return_indices=True)
        return (pooled, where,
                torch.index_put(x, (rows,), values, accumulate=True),
                torch.argmax(x), torch.amin(x), x.mean(dim=None),
                F.adaptive_avg_pool3d(volume, (2, 3, 2)),
                # an integer input averaged as float: converted first, not truncated
                counts.mean(dim=None, dtype=torch.float32),
                counts.mean(dim=1, dtype=torch.float32))


INPUTS = (torch.randn(2, 3, 7, 6), torch.randn(5, 4),
          torch.tensor([0, 2, 0, -1, 2, 0]), torch.randn(6, 4), torch.randn(1, 2, 5, 7, 4),
          torch.randint(0, 10, (5, 10), generator=torch.Generator().manual_seed(0)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("extra-ops") / "extra_ops.pte"
    result = executorch_tensorrt.export_program(ExtraOps(), INPUTS, path, progress=None,
                                                write_expected_file=False)
    return result, path


def test_every_node_is_on_tensorrt(exported):
    result, _ = exported
    assert result.report.rejected == {}
    assert result.backends == {"forward": ["TensorRTBackend"]}


def test_the_program_matches_eager(exported, allow_fallback):
    from executorch.runtime import Runtime
    _, path = exported
    method = Runtime.get().load_program(path).load_method("forward")
    outputs = method.execute(list(INPUTS))
    expected = ExtraOps()(*INPUTS)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class Fold(torch.nn.Module):
    """`fold` (col2im) decomposes to index_put(accumulate=True) with the batch
    and channel dims left whole (None) and 2-D index tensors over the spatial
    dims: MobileViT's patch folding (stride = kernel) and an overlapping fold
    whose sums must add up where patches meet."""

    def forward(self, patches, overlapping):
        return (F.fold(patches, output_size=(8, 6), kernel_size=(2, 2), stride=(2, 2)),
                F.fold(overlapping, output_size=(5, 5), kernel_size=(3, 3), stride=(2, 2)))


def test_fold_is_on_tensorrt_and_matches_eager(tmp_path, allow_fallback):
    from executorch.runtime import Runtime
    inputs = (torch.randn(2, 12, 12), torch.randn(1, 18, 4))
    result = executorch_tensorrt.export_program(Fold(), inputs, tmp_path / "fold.pte",
                                                progress=None, write_expected_file=False)
    assert result.report.rejected == {}, result.report.to_table()
    assert len(result.report.partitions) == 1
    outputs = Runtime.get().load_program(result.path).load_method("forward").execute(list(inputs))
    for got, want in zip(outputs, Fold()(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
