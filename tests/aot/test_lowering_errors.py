"""Ops that no delegate takes and the runtime has no kernel for are refused
before to_executorch, naming the op and the remedy; errors ExecuTorch's own
passes raise inside export come out as ExportErrors keeping ExecuTorch's text."""
from __future__ import annotations

import pytest
import torch
from executorch.exir import EdgeProgramManager

from executorch_tensorrt import export
from executorch_tensorrt.aot import export as export_module
from executorch_tensorrt.aot.checks.lowering_errors import executorch_step
from executorch_tensorrt.errors import ExportError


@torch.library.custom_op("ettrt_test::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@opaque.register_fake
def _(x):
    return torch.empty_like(x)


class Custom(torch.nn.Module):  # a custom op: no ONNX translation, no out variant
    def forward(self, x):
        return torch.sin(opaque(torch.cos(x)))


@pytest.fixture
def to_executorch_calls(monkeypatch):
    calls = []
    real = EdgeProgramManager.to_executorch
    monkeypatch.setattr(EdgeProgramManager, "to_executorch",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


def test_op_without_kernel_refused_before_to_executorch(tmp_path, to_executorch_calls):
    with pytest.raises(ExportError) as info:
        export(Custom(), (torch.randn(2, 8),), tmp_path / "m.pte", progress=None)
    text = str(info.value)
    assert "ettrt_test::opaque (no out variant)" in text and "outside every delegate" in text and "partitioners=" in text
    assert not to_executorch_calls  # refused before ExecuTorch's lowering ran
    assert not list(tmp_path.iterdir())  # nothing written


def test_executorch_pass_error_becomes_export_error(tmp_path, monkeypatch):
    """With the check out of the way, ExecuTorch's own "Missing out variants"
    from to_executorch is an ExportError that keeps its text and names the op."""
    monkeypatch.setattr(export_module, "check_edge_kernels", lambda edge: None)
    with pytest.raises(ExportError) as info:
        export(Custom(), (torch.randn(2, 8),), tmp_path / "m.pte", progress=None)
    text = str(info.value)
    assert "to_executorch failed" in text and "Missing out variants" in text
    assert "ettrt_test::opaque" in text and "partitioners=" in text
    assert isinstance(info.value.__cause__, RuntimeError)


def test_only_executorch_errors_are_wrapped():
    """Our own errors (raised by code ExecuTorch called back, or before it)
    keep their type; ExecuTorch's become ExportErrors."""
    with pytest.raises(ValueError, match="ours"):
        with executorch_step("to_executorch"):
            raise ValueError("ours")
    theirs = compile("def fail():\n    raise KeyError('theirs')\n",
                     "/site-packages/executorch/exir/fake_pass.py", "exec")
    scope: dict = {}
    exec(theirs, scope)
    with pytest.raises(ExportError, match="ExecuTorch said: KeyError: 'theirs'"):
        with executorch_step("to_executorch"):
            scope["fail"]()
