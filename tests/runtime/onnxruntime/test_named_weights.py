"""Weights that onnxruntime's transpose optimizer re-lays out.

A weight added after a layout Transpose (`permute(conv(x)) + pos`, the
ViTDet/SAM position embedding) and permuted back: onnxruntime pushes the
Transpose through the Add by transposing `pos` (and reshaping a rank-1 scale)
under the same name. Every weight is handed over in place as a file in memory
(named_weights.py): onnxruntime builds the re-laid-out tensor in memory of its
own, so the outputs equal eager's, the named data's bytes stay as stored (a
write would also fault: ExecuTorch maps them read-only), and a second method
reading the same weight as stored still sees it so. Exported for real, run
through executorch.runtime with the fallback; the square case checks numbers,
not just that it runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import tensorrt_blobs
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob


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


class NormAfterPermute(torch.nn.Module):
    """The SAM block's NHWC part: + pos, LayerNorm, MLP (biases) after a permute."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.patch = torch.nn.Conv2d(3, 512, 4, 4)
        self.pos = torch.nn.Parameter(torch.randn(1, 8, 8, 512))
        self.norm = torch.nn.LayerNorm(512)
        self.up, self.down = torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 512)
        self.head = torch.nn.Conv2d(512, 4, 1)

    def forward(self, x):
        y = self.patch(x).permute(0, 2, 3, 1) + self.pos
        y = y + self.down(torch.nn.functional.gelu(self.up(self.norm(y))))
        return self.head(y.permute(0, 3, 1, 2))


class ReadsPosAsStored(torch.nn.Module):
    def __init__(self, pos):
        super().__init__()
        self.pos = pos

    def forward(self, y):
        return torch.tanh(y * 2.0 + self.pos) - self.pos.sum(-1, keepdim=True)


X = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def stored_bytes(pte: Path) -> dict[str, bytes]:
    """Every named-data key's bytes, read from the files (the .pte's own
    segment and the .ptd beside it), not through ExecuTorch."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch_tensorrt.program.named_data import read_ptd_segments

    out = {}
    ptd = pte.with_suffix(".ptd")
    if ptd.exists():
        raw = ptd.read_bytes()
        out = {key: raw[at:at + size] for key, (at, size) in read_ptd_segments(ptd).items()}
    named = deserialize_pte_binary(pte.read_bytes()).named_data
    for key, entry in (named.pte_data.items() if named is not None else ()):
        out[key] = bytes(named.buffers[entry.buffer_index])
    return out


def run_methods(pte: Path, calls: dict, order: list[str]):
    """Loads the methods in `order` (sessions built in that order), runs each
    twice, returns {method: outputs} and the executors this load made."""
    import executorch_tensorrt  # noqa: F401 - registers TensorRTBackend
    from executorch.runtime import Runtime
    from executorch_tensorrt.runtime import callbacks

    before = callbacks.install().live_executors()
    data = pte.with_suffix(".ptd")
    program = Runtime.get().load_program(str(pte), data_path=str(data) if data.exists() else None)
    methods = {name: program.load_method(name) for name in order}
    outputs = {name: [methods[name].execute(calls[name])[0] for _ in range(2)] for name in order}
    mine = [e for e in callbacks.install().live_executors() if not any(e is b for b in before)]
    return outputs, mine, (program, methods)


def assert_named_data_unwritten(pte: Path, executors) -> int:
    stored = stored_bytes(pte)
    weights = [w for e in executors for w in e.weights._weights]
    for w in weights:
        assert bytes(w.view) == stored[w.key], f"{w.name}'s bytes changed after the runs"
    return len(weights)


@pytest.fixture(scope="module", params=[256, 8], ids=["broadcast-fails", "square-dims"])
def exported(request, tmp_path_factory):
    model = PosEmbed(request.param).eval()
    pte = tmp_path_factory.mktemp("layout") / "m.pte"
    result = export_program(model, (X,), str(pte), progress=None, external_weights=True)
    assert result.backends == {"forward": ["TensorRTBackend"]}  # all of it in one partition
    assert result.run_check.ok, result.run_check.describe()  # export ran it (issue 21)
    with torch.no_grad():
        return pte, model(X).numpy()


def test_weight_after_a_layout_transpose_matches_eager_and_stays_as_stored(exported,
                                                                          allow_fallback):
    pte, want = exported
    names = {w.name for w in read_blob(tensorrt_blobs(pte)[0]).meta.weights}
    assert "pos" in names  # a named-data weight, handed over in place
    outputs, executors, _ = run_methods(pte, {"forward": [X]}, ["forward"])
    for out in outputs["forward"]:
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    assert assert_named_data_unwritten(pte, executors) == len(names)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """`pos` is one named-data entry (inside the .pte) read by two methods'
    sessions: one whose transpose optimizer re-lays it out, one that reads it
    as stored."""
    torch.manual_seed(0)
    pos = torch.nn.Parameter(torch.randn(1, 8, 8, 256))
    a = PosEmbed(256).eval()
    a.pos = pos
    b = ReadsPosAsStored(pos).eval()
    y = torch.randn(1, 8, 8, 256, generator=torch.Generator().manual_seed(2))
    programs = {"forward": torch.export.export(a, (X,)), "other": torch.export.export(b, (y,))}
    pte = tmp_path_factory.mktemp("shared") / "shared.pte"
    export_program(programs, None, pte, progress=None, run_check=False,
                   write_expected_file=False)
    keys = [{w.name: w.key for w in read_blob(blob).meta.weights}["pos"]
            for blob in tensorrt_blobs(pte)]
    assert len(keys) == 2 and keys[0] == keys[1]  # one entry, both partitions
    with torch.no_grad():
        return pte, {"forward": [X], "other": [y]}, {"forward": a(X), "other": b(y)}


@pytest.mark.parametrize("order", [["forward", "other"], ["other", "forward"]])
def test_a_weight_two_methods_share_is_re_laid_out_for_one_only(shared, allow_fallback, order):
    pte, calls, want = shared
    outputs, executors, _ = run_methods(pte, calls, order)
    for name, outs in outputs.items():
        for out in outs:
            torch.testing.assert_close(out, want[name], rtol=1e-4, atol=1e-4)
    assert assert_named_data_unwritten(pte, executors) > 2


def test_an_fp16_build_with_norms_after_a_permute_matches_eager(tmp_path, allow_fallback):
    """Upcast weights (our float32 copies) read by LayerNorm and Add after a
    permute stay alive as long as the session: when they went to onnxruntime
    as its "own copies" and ours were freed after the build, onnxruntime still
    read ours and the outputs were NaN."""
    model = NormAfterPermute().eval()
    pte = tmp_path / "fp16.pte"
    export_program(model, (X,), pte, progress=None, run_check=False, precision="fp16",
                   write_expected_file=False, external_weights=True)
    outputs, executors, _ = run_methods(pte, {"forward": [X]}, ["forward"])
    with torch.no_grad():
        want = model(X)
    for out in outputs["forward"]:
        torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
    (executor,) = executors
    assert executor.weights.copied_bytes > 0  # the upcast copies
    assert_named_data_unwritten(pte, executors)
