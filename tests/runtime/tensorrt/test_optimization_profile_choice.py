"""Several optimization profiles at run time, without a GPU: the bounds every
call is checked against (the union of the profiles, each named when a call is
outside all), the profile chosen per call (runtime/tensorrt/optimization_profiles.py), the
engine's own profiles checked at load, and the rebuild at load keeping every
profile. The TensorRT context switch runs on the GPU
(test_tensorrt_profiles_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from executorch_tensorrt.aot.export import export
from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.errors import ArgumentError, InvalidProgramError
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.tensorrt.portability import rebuilt_engine
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor
from executorch_tensorrt.runtime.tensorrt.optimization_profiles import (
    ProfileChoice,
    check_engine_profiles,
    profile_choice,
)
from executorch_tensorrt.tensorrt import engine_builder
from executorch_tensorrt.tensorrt.flavor import load_tensorrt
from helpers import tensorrt_blobs
from helpers import Args


class AddScaled(torch.nn.Module):
    def forward(self, x, y):
        return (x * 2 + y).relu()


BUCKETS = [(1, 16), (17, 256), (257, 2048)]


@pytest.fixture(scope="module")
def blob3(tmp_path_factory):
    batch = torch.export.Dim("batch", min=1, max=2048)
    path = export(AddScaled(), (torch.ones(4, 3), torch.ones(4, 3)),
                  tmp_path_factory.mktemp("p") / "add3.pte", profiles=3, progress=None,
                  dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    return read_blob(tensorrt_blobs(path)[0])


def narrowed(blob, buckets):
    """The blob with profiles for `buckets` only (sizes past the last are in none)."""
    sets = [[{"name": n, "min": [lo, 3], "opt": [hi, 3], "max": [hi, 3]}
             for n in ("arg_0", "arg_1")] for lo, hi in buckets]
    meta = dict(blob.metadata, profiles=sets[0], optimization_profiles=sets)
    return read_blob(write_blob(blob.engine, meta, onnx=blob.onnx))


def test_bindings_are_checked_against_the_union_of_the_profiles(blob3):
    inputs, _ = split_bindings(blob3.metadata)
    assert [(b.min_shape, b.max_shape) for b in inputs] == [((1, 3), (2048, 3))] * 2
    assert inputs[0].profile_bounds == tuple(((lo, 3), (hi, 3)) for lo, hi in BUCKETS)


def test_the_fallback_runs_each_profile_and_refuses_a_call_outside_all(blob3):
    executor = OnnxRuntimeExecutor(narrowed(blob3, BUCKETS[:2]))
    for rows in (1, 16, 17, 256):
        a = Args()
        x, y = np.full((rows, 3), 1.5, np.float32), np.ones((rows, 3), np.float32)
        out = np.zeros((rows, 3), np.float32)
        executor.execute(a.array(a.tensor(x, is_input=True, shape=(rows, 3)),
                                 a.tensor(y, is_input=True, shape=(rows, 3)),
                                 a.tensor(out, is_input=False, shape=(rows, 3))), 3)
        assert np.array_equal(out, np.full((rows, 3), 4.0, np.float32))
    a = Args()
    big = np.zeros((257, 3), np.float32)
    with pytest.raises(ArgumentError) as info:
        executor.execute(a.array(a.tensor(big, is_input=True, shape=(257, 3)),
                                 a.tensor(big, is_input=True, shape=(257, 3)),
                                 a.tensor(big, is_input=False, shape=(257, 3))), 3)
    assert str(info.value) == (
        "input 0 ('arg_0') has shape [257, 3], outside every optimization profile of the "
        "engine (profile 0: min [1, 3], max [16, 3]; profile 1: min [17, 3], max [256, 3])")


def test_the_first_profile_containing_the_call_is_chosen(blob3):
    inputs, _ = split_bindings(blob3.metadata)
    choice = profile_choice(blob3.metadata, inputs)
    assert choice.count == 3
    for rows, index in ((1, 0), (16, 0), (17, 1), (256, 1), (257, 2), (2048, 2), (5, 0)):
        assert choice.index_for([(rows, 3), (rows, 3)]) == index
    overlapping = ProfileChoice(["x"], [[((1,), (64,))], [((1,), (2048,))]])
    assert [overlapping.index_for([(n,)]) for n in (1, 64, 65)] == [0, 0, 1]


def test_shapes_in_no_single_profile_are_refused_naming_every_profile(blob3):
    inputs, _ = split_bindings(blob3.metadata)
    choice = profile_choice(blob3.metadata, inputs)
    with pytest.raises(ArgumentError) as info:  # each input in another profile
        choice.index_for([(5, 3), (300, 3)])
    text = str(info.value)
    assert text.startswith("input shapes [[5, 3], [300, 3]] fit no optimization profile of "
                           "the engine; it has 3: profile 0: arg_0 min [1, 3] max [16, 3], "
                           "arg_1 min [1, 3] max [16, 3]; profile 1:"), text


def test_one_profile_needs_no_choice(blob3):
    meta = dict(blob3.metadata)
    del meta["optimization_profiles"]
    assert profile_choice(meta, split_bindings(meta)[0]) is None


class RecordingContext:
    """FAKE IExecutionContext: records profile switches (no GPU runs TensorRT here)."""

    def __init__(self, accept=True):
        self.switches: list[tuple[int, int]] = []
        self.accept = accept

    def set_optimization_profile_async(self, index, stream) -> bool:
        self.switches.append((index, stream))
        return self.accept


def test_the_context_switches_only_when_the_profile_changes():
    choice = ProfileChoice(["x"], [[((1,), (16,))], [((17,), (256,))]])
    context = RecordingContext()
    done = [choice.switch(context, choice.index_for([(n,)]), 7) for n in (4, 5, 20, 30, 2)]
    assert done == [False, False, True, False, True]
    assert context.switches == [(1, 7), (0, 7)] and choice.switches == 2
    with pytest.raises(ArgumentError, match="refused to switch .* optimization profile 1"):
        choice.switch(RecordingContext(accept=False), 1, 7)
    assert choice.current == -1  # unknown after a refusal: the next call switches again
    assert choice.switch(context, 0, 7) and context.switches[-1] == (0, 7)


class StandInEngine:
    """FAKE ICudaEngine reporting optimization profiles (no GPU deserializes one here)."""

    def __init__(self, shapes: dict[tuple[str, int], list]):
        self.shapes = shapes
        self.num_optimization_profiles = 1 + max(k for _, k in shapes)

    def get_tensor_profile_shape(self, name, k):
        return self.shapes[name, k]


def engine_like(meta) -> dict:
    return {(p["name"], k): [p["min"], p["opt"], p["max"]]
            for k, profile in enumerate(meta["optimization_profiles"]) for p in profile}


def test_the_engines_own_profiles_must_be_the_blobs(blob3):
    meta = blob3.metadata
    shapes = engine_like(meta)
    check_engine_profiles(StandInEngine(shapes), meta)
    fewer = {key: v for key, v in shapes.items() if key[1] < 2}
    with pytest.raises(InvalidProgramError, match="lists 3 optimization profiles, the engine "
                                                  "has 2"):
        check_engine_profiles(StandInEngine(fewer), meta)
    moved = dict(shapes)
    moved["arg_1", 1] = [[17, 3], [200, 3], [256, 3]]
    with pytest.raises(InvalidProgramError, match=r"profile 1 of the engine gives input "
                                                  r"'arg_1' min/opt/max \[\[17, 3\], \[200, 3\]"):
        check_engine_profiles(StandInEngine(moved), meta)


def test_the_rebuild_at_load_keeps_every_profile(blob3, tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(tmp_path))
    stale = read_blob(write_blob(blob3.engine, dict(blob3.metadata, trt_version="0.1.2"),
                                 onnx=blob3.onnx))
    engine = rebuilt_engine(stale, load_tensorrt(), "SM89")
    built = [b for b in engine_builder._cache.values() if b.engine == engine]
    assert built and built[0].optimization_profiles == 3


def test_a_blob_without_profiles_takes_the_engines_own():
    """Torch-TensorRT's blobs record no profiles; their engines may hold several."""
    from executorch_tensorrt.runtime.tensorrt.optimization_profiles import engine_profile_choice

    meta = {"io_bindings": [{"name": "x", "dtype": "", "shape": [], "is_input": True},
                            {"name": "y", "dtype": "", "shape": [], "is_input": False}]}
    inputs, _ = split_bindings(meta)
    engine = StandInEngine({("x", 0): [[1, 3], [1, 3], [1, 3]],
                            ("x", 1): [[2, 3], [64, 3], [512, 3]]})
    choice = engine_profile_choice(engine, inputs)
    assert [choice.index_for([(n, 3)]) for n in (1, 2, 512)] == [0, 1, 1]
    with pytest.raises(ArgumentError, match=r"profile 1: x min \[2, 3\] max \[512, 3\]"):
        choice.index_for([(513, 3)])
    assert engine_profile_choice(StandInEngine({("x", 0): [[1, 3]] * 3}), inputs) is None
