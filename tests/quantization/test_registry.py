"""The registry of formats drives quantize(), the ONNX export's rewrites and the
CLI's scheme help: a format registered here (a test's own) is taken by each,
with no other module changed."""
from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F

from executorch_tensorrt.blob.format import WEIGHT_DTYPES
from executorch_tensorrt.cli.parser import build_parser
from executorch_tensorrt.quantization import QuantizationError, quantization_plan, quantize
from executorch_tensorrt.quantization.registry import (FORMATS, QuantFormat, Scheme, format_of,
                                                       register, scheme_named, unregister)


class _HalfLinear(torch.nn.Module):
    """A stand-in module form: the weight stored as float16."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.register_buffer("weight16", linear.weight.detach().to(torch.float16))
        self.bias = linear.bias

    def forward(self, x):
        return F.linear(x, self.weight16.to(x.dtype), self.bias)


def _steps():
    module = types.ModuleType("half_format")
    module.TRANSLATIONS = {}
    module.lower_onnx = None
    module.quantize_linear = lambda linear, layer, group: (_HalfLinear(linear), "half (test)")
    module.quantize_embedding = None
    module.check_options = None
    return module


@pytest.fixture
def half_format():
    fmt = QuantFormat("half_test", (Scheme("half_test_weight_only", "float16 weights (a test's)",
                                           min_capability=90),),
                      weight_dtype="float16", load=_steps)
    register(fmt)
    yield fmt
    unregister(fmt.name)


def test_a_registered_format_is_quantized_by_quantize(half_format):
    model = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    quantized = quantize(model, scheme="half_test_weight_only")
    assert isinstance(quantized[0], _HalfLinear)
    assert quantization_plan(quantized).layers == {"0": "half (test)"}
    assert format_of("half_test_weight_only") is half_format


def test_a_registered_format_is_in_the_cli_help_with_its_limits(half_format):
    export = build_parser()._subparsers._group_actions[0].choices["export"]
    help_text = " ".join(export.format_help().split())
    assert "half_test_weight_only (SM90+ targets only)" in help_text


def test_unregistered_it_is_an_unknown_scheme_again(half_format):
    unregister(half_format.name)
    with pytest.raises(QuantizationError, match="unknown quantization scheme"):
        scheme_named("half_test_weight_only")
    register(half_format)  # for the fixture's teardown


def test_a_scheme_cannot_be_registered_twice():
    with pytest.raises(QuantizationError, match="registered already"):
        register(QuantFormat("int8_again", (Scheme("int8_weight_only", "again"),),
                             weight_dtype="int8"))


def test_every_built_in_format_loads_its_steps_and_stores_a_blob_weight_dtype():
    for fmt in FORMATS.values():
        steps = fmt.steps()
        assert fmt.weight_dtype in WEIGHT_DTYPES, fmt.name
        for name in ("TRANSLATIONS", "lower_onnx", "quantize_linear", "quantize_embedding",
                     "check_options", "linear_module", "dequantize_weight",
                     "quantize_activation", "dequantize_activation", "element_dtype",
                     "max_value", "group_sizes", "check_group_size", "quantize_weight"):
            assert hasattr(steps, name), (fmt.name, name)
        weight_only = [s for s in fmt.schemes if s.implemented and not s.activations]
        assert not weight_only or steps.quantize_linear is not None, fmt.name


def test_the_registry_imports_no_torch():
    import subprocess
    code = ("import sys; import executorch_tensorrt.quantization.registry as r; "
            "r.scheme_named('int4_weight_only'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"EXECUTORCH_TENSORRT_SKIP_REGISTRATION": "1",
                              **__import__("os").environ}, check=True).stdout
    assert out.strip() == "[]"
