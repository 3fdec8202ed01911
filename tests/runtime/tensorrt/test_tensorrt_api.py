"""The TensorRT API the package calls exists in the installed bindings, and the
GPU stand-in offers the same methods (tensorrt_api_calls.py).

No machine here runs an engine: without this, a renamed or misspelled TensorRT
call reaches the first user with a GPU. Checked against tensorrt_rtx (a pinned
dependency) and, where it imports, standard tensorrt; the checker is shown to
fail on a copy of the source with planted mistakes.
"""
from __future__ import annotations

import importlib
import os
import pathlib
import shutil

import pytest
import tensorrt_rtx

import executorch_tensorrt
from tensorrt_api_calls import OTHER_VERSIONS, RECEIVERS, collect
from tensorrt_api_checks import problems, stand_in_problems

# Another source tree (a copy with a planted mistake) with ETRT_TENSORRT_API_ROOT.
PACKAGE = pathlib.Path(os.environ.get("ETRT_TENSORRT_API_ROOT")
                       or pathlib.Path(executorch_tensorrt.__file__).parent)
STAND_IN = pathlib.Path(__file__).parents[3] / "tools" / "gpu" / "stand_in_engine.py"


def _flavours():
    """tensorrt_rtx, and standard tensorrt when a real one (with a Builder) imports."""
    found = [tensorrt_rtx]
    try:
        standard = importlib.import_module("tensorrt")
    except ImportError:
        return found
    return found + ([standard] if hasattr(standard, "Builder") else [])


def _findings(root: pathlib.Path, stand_in: pathlib.Path = STAND_IN) -> list[str]:
    out = []
    for module in _flavours():
        report = collect(module, root)
        out += report.untyped + problems(module, report.uses, OTHER_VERSIONS)
        out += [f"RECEIVERS entry {name!r} types nothing the code uses"
                for name in sorted(set(RECEIVERS) - report.used_receivers)]
        out += stand_in_problems(module, report.uses, stand_in)
    return out


def test_every_tensorrt_call_exists_with_a_fitting_signature():
    report = collect(tensorrt_rtx, PACKAGE)
    names = {(u.cls, u.name) for u in report.uses}
    # The executor's core calls are among them: the collector follows the objects.
    for core in [("IExecutionContext", "execute_async_v3"), ("IExecutionContext",
                 "set_tensor_address"), ("IExecutionContext", "set_input_shape"),
                 ("IExecutionContext", "get_tensor_shape"), ("IExecutionContext",
                 "set_optimization_profile_async"), ("IExecutionContext", "set_device_memory"),
                 ("ICudaEngine", "create_execution_context"), ("Runtime",
                 "deserialize_cuda_engine"), ("Refitter", "refit_cuda_engine"),
                 ("IRuntimeConfig", "create_runtime_cache"), ("OnnxParser", "supports_model_v2")]:
        assert core in names, core
    assert len(names) >= 90, len(names)
    assert _findings(PACKAGE) == []


def test_other_versions_table_is_current():
    """Its entries are used and are really missing from TensorRT-RTX."""
    report = collect(tensorrt_rtx, PACKAGE)
    used = {(u.cls, u.name) for u in report.uses}
    for cls, name in OTHER_VERSIONS:
        assert (cls, name) in used
        assert not hasattr(getattr(tensorrt_rtx, cls), name)


def _planted(tmp_path, edits: dict[str, tuple[str, str]]) -> pathlib.Path:
    root = tmp_path / "executorch_tensorrt"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for rel, (old, new) in edits.items():
        path = root / rel
        text = path.read_text()
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new, 1))
    return root


@pytest.mark.parametrize("rel, old, new, expected", [
    ("runtime/cuda/graphs.py", "context.execute_async_v3(stream.handle)",
     "context.execute_asnyc_v3(stream.handle)", "has no attribute 'execute_asnyc_v3'"),
    ("runtime/tensorrt/context.py", "self.context.set_tensor_address(self._names[k], address)",
     "self.context.set_tensor_address(self._names[k])", "set_tensor_address called with 1"),
    ("runtime/tensorrt/executor.py", "self.runtime.deserialize_cuda_engine(engine)",
     "self.runtime.deserialize_engine(engine)", "has no attribute 'deserialize_engine'"),
    ("runtime/tensorrt/refit.py", "refitter.refit_cuda_engine()", "refitter.refit_engine()",
     "has no attribute 'refit_engine'"),
    ("tensorrt/engine_builder.py", "config.set_flag(flags.STRIP_PLAN)",
     "config.set_flag(flags.STRIP_PLANS)", "has no attribute 'STRIP_PLANS'"),
    ("runtime/tensorrt/executor.py", "def engine_binding(trt, engine, binding",
     "def engine_binding(trt, eng, binding", "'eng' holds a TensorRT ICudaEngine"),
    ("runtime/tensorrt/optimization_profiles.py", "context.set_optimization_profile_async(index, stream)",
     "context.set_optimization_profile_async(index, stream, True)", "takes (profile_index, stream_handle)"),
])
def test_planted_mistake_fails(tmp_path, rel, old, new, expected):
    found = _findings(_planted(tmp_path, {rel: (old, new)}))
    assert any(expected in f for f in found), found


def test_stand_in_drift_fails(tmp_path):
    """A stand-in without a method the runtime calls, or with another arity, fails."""
    text = STAND_IN.read_text()
    for old, new, expected in [
            ("def set_optimization_profile_async(", "def set_profile(", "the stand-in AddContext lacks"),
            ("def execute_async_v3(self, stream: int)", "def execute_async_v3(self, stream, x)",
             "has 2 parameters")]:
        planted = tmp_path / "stand_in_engine.py"
        assert old in text
        planted.write_text(text.replace(old, new))
        found = _findings(PACKAGE, planted)
        assert any(expected in f for f in found), found
