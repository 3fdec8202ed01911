"""Several TensorRT optimization profiles (docs/gpu-runtime.md, "Optimization
profiles"): the option's forms and errors, their resolution on a real
torch.export program, real TensorRT-RTX builds with 1 and 3 profiles, the
export (Python and CLI) writing every profile into the blob, and the fallback
running calls in each profile's range."""
from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
import torch

from executorch_tensorrt.aot.export import export
from executorch_tensorrt.aot.profiles.option import normalize_profiles, parse_profile_text
from executorch_tensorrt.aot.profiles.shapes import input_profile_sets, resolve_profiles
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.tensorrt.engine_builder import build_engine
from executorch_tensorrt.tensorrt.flavor import load_tensorrt
from executorch_tensorrt.tensorrt.options import BuildOptions, InputProfile
from helpers import cli_main, tensorrt_blobs


class AddScaled(torch.nn.Module):
    def forward(self, x, y):
        return (x * 2 + y).relu()


BATCH = torch.export.Dim("batch", min=1, max=2048)
EXAMPLE = (torch.ones(4, 3), torch.ones(4, 3))
DYNAMIC = {"x": {0: BATCH}, "y": {0: BATCH}}
BUCKETS = [(1, 16), (17, 256), (257, 2048)]


@pytest.fixture(scope="module")
def program():
    return torch.export.export(AddScaled(), EXAMPLE, dynamic_shapes=DYNAMIC)


def x_profiles(ep, option):
    """(min, opt, max) of input x's dimension 0 in each profile."""
    return [(p[0].min[0], p[0].opt[0], p[0].max[0])
            for p in input_profile_sets(ep, resolve_profiles(ep, option))]


# -- the option's forms ---------------------------------------------------------------------

@pytest.mark.parametrize("value, message", [
    (0, "must be 1 to 16"), (17, "must be 1 to 16"), (True, "profiles=True"),
    ([], "empty list"), ("batch", "profiles='batch'"), ({"batch": (1, 2, 3)}, "a list of dicts"),
    ([{}], r"profiles\[0\] names no dimension"), ([["batch"]], r"profiles\[0\] is \['batch'\]"),
    ([{"batch": (1, 8)}], r"profiles\[0\]\['batch'\] is \(1, 8\); expected \(min, opt, max\)"),
    ([{"batch": (8, 4, 16)}], "min 8, opt 4, max 16 are not ordered"),
    ([{"batch": (1, 2, -3)}], "non-negative"), ([{"batch": (1, 2.5, 3)}], "three"),
    ([{"x-0": (1, 2, 3)}], "dimension 'x-0' is not a torch.export Dim"),
    ([{"batch": (1, 2, 3)}] * 17, "at most 16"),
])
def test_bad_forms_name_the_value_and_what_is_expected(value, message):
    with pytest.raises(ValueError, match=message):
        normalize_profiles(value)


def test_every_way_of_naming_a_dimension_means_the_same():
    forms = [{BATCH: (1, 8, 16)}, {"batch": (1, 8, 16)}, {"x:0": [1, 8, 16]},
             {"0:0": {"min": 1, "opt": 8, "max": 16}}, {(0, 0): (1, 8, 16)}]
    assert {normalize_profiles([f]) for f in forms[:2]} == {((("batch", (1, 8, 16)),),)}
    program = torch.export.export(AddScaled(), EXAMPLE, dynamic_shapes=DYNAMIC)
    resolved = [resolve_profiles(program, [f, {"batch": (17, 2048, 2048)}]) for f in forms]
    assert all(r == resolved[0] for r in resolved), resolved
    assert x_profiles(program, [forms[2], {"batch": (17, 2048, 2048)}]) == [
        (1, 8, 16), (17, 2048, 2048)]


def test_cli_profile_text():
    assert parse_profile_text("batch=1:8:16,0:1=3:3:3") == {"batch": [1, 8, 16],
                                                              "0:1": [3, 3, 3]}
    for bad in ("batch=1:8", "batch", "=1:2:3", "batch=a:b:c"):
        with pytest.raises(ValueError, match="expected DIM=MIN:OPT:MAX"):
            parse_profile_text(bad)


# -- resolved on a real program -------------------------------------------------------------

def test_default_is_one_profile_over_the_export_range(program):
    assert x_profiles(program, None) == x_profiles(program, 1) == [(1, 2048, 2048)]


@pytest.mark.parametrize("count, buckets", [
    (2, [(1, 64), (65, 2048)]), (3, BUCKETS),
    (4, [(1, 8), (9, 64), (65, 512), (513, 2048)])])
def test_automatic_split_is_power_of_two_buckets_of_the_widest_dimension(program, count,
                                                                          buckets):
    assert x_profiles(program, count) == [(lo, hi, hi) for lo, hi in buckets]


def test_automatic_split_of_a_narrow_range_gives_fewer_profiles():
    dim = torch.export.Dim("n", min=1, max=3)
    ep = torch.export.export(AddScaled(), (torch.ones(2, 3), torch.ones(2, 3)),
                             dynamic_shapes={"x": {0: dim}, "y": {0: dim}})
    assert x_profiles(ep, 8) == [(1, 2, 2), (3, 3, 3)]


@pytest.mark.parametrize("option, message", [
    ([{"seq": (1, 2, 3)}], r"names dimension 'seq', which is not a dynamic dimension of the "
                           r"program; its dynamic dimensions are \['batch', 'x:0', 'y:0'\]"),
    ([{"x:1": (3, 3, 3)}], "names dimension 'x:1', which is not a dynamic dimension"),
    ([{"batch": (1, 8, 4096)}], r"\[1, 8, 4096\], outside the export range of batch: 1..2048"),
    ([{"batch": (1, 8, 16), "x:0": (1, 16, 16)}], "gives batch two ranges"),
    ([{"batch": (1, 8, 8)}, {"batch": (17, 2048, 2048)}],
     "leave batch = 9..16 uncovered, inside the export range"),
    ([{"batch": (1, 8, 1024)}], "leave batch = 1025..2048 uncovered"),
])
def test_explicit_profiles_are_checked_against_the_program(program, option, message):
    with pytest.raises(ExportError, match=message):
        resolve_profiles(program, option)


def test_coverage_is_checked_across_dimensions():
    a, b = torch.export.Dim("a", min=1, max=64), torch.export.Dim("b", min=1, max=64)
    ep = torch.export.export(AddScaled(), (torch.ones(4, 5), torch.ones(4, 5)),
                             dynamic_shapes={"x": {0: a, 1: b}, "y": {0: a, 1: b}})
    halves = [{"a": (1, 32, 32), "b": (1, 32, 32)}, {"a": (33, 64, 64), "b": (33, 64, 64)}]
    with pytest.raises(ExportError, match="leave a = 1..32, b = 33..64 uncovered"):
        resolve_profiles(ep, halves)
    sets = input_profile_sets(ep, resolve_profiles(ep, halves + [{"b": (1, 64, 64)}]))
    assert [(s[0].min, s[0].max) for s in sets] == [
        ((1, 1), (32, 32)), ((33, 33), (64, 64)), ((1, 1), (64, 64))]


def test_a_static_program_has_nothing_to_split():
    ep = torch.export.export(AddScaled(), EXAMPLE)
    with pytest.raises(ExportError, match="no dynamic dimension to split"):
        resolve_profiles(ep, 3)


# -- real TensorRT-RTX builds ---------------------------------------------------------------

def onnx_of_add_scaled() -> bytes:
    import io
    f = io.BytesIO()
    torch.onnx.export(AddScaled(), EXAMPLE, f, dynamo=False, input_names=["x", "y"],
                      dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    return f.getvalue()


def test_an_engine_is_built_with_every_profile():
    onnx_bytes = onnx_of_add_scaled()
    sets = [[InputProfile((lo, 3), (hi, 3), (hi, 3))] * 2 for lo, hi in BUCKETS]
    options = BuildOptions(("SM89",))
    one = build_engine(onnx_bytes, options, profiles=sets[0], progress=None)
    three = build_engine(onnx_bytes, options, profiles=sets, progress=None)
    assert (one.optimization_profiles, three.optimization_profiles) == (1, 3)
    assert len(three.engine) > len(one.engine)  # a plan per profile (docs/gpu-runtime.md)
    swapped = build_engine(onnx_bytes, options, profiles=sets[::-1], progress=None)
    assert swapped.engine is not three.engine  # order is part of the in-process cache key


def test_the_engine_reads_back_its_profiles_on_a_gpu():
    """Deserializes the 3-profile engine and reads each profile back. Needs a
    GPU the installed TensorRT supports (cudaError 35 without one)."""
    trt = load_tensorrt()
    sets = [[InputProfile((lo, 3), (hi, 3), (hi, 3))] * 2 for lo, hi in BUCKETS]
    built = build_engine(onnx_of_add_scaled(), BuildOptions(), profiles=sets, progress=None)
    engine = trt.module.Runtime(trt.module.Logger()).deserialize_cuda_engine(built.engine)
    if engine is None:
        pytest.skip("TensorRT cannot deserialize an engine here (no GPU it supports)")
    assert engine.num_optimization_profiles == 3
    for k, (lo, hi) in enumerate(BUCKETS):
        assert [list(s) for s in engine.get_tensor_profile_shape("x", k)] == [
            [lo, 3], [hi, 3], [hi, 3]]


# -- export, blob and the fallback ----------------------------------------------------------

@pytest.fixture(scope="module")
def exported_3(tmp_path_factory):
    path = export(AddScaled(), EXAMPLE, tmp_path_factory.mktemp("p") / "add3.pte",
                  dynamic_shapes=DYNAMIC, profiles=3, progress=None)
    return path, read_blob(tensorrt_blobs(path)[0])


def test_export_writes_every_profile_into_the_blob(exported_3):
    _, blob = exported_3
    meta = blob.metadata
    sets = meta["optimization_profiles"]
    assert meta["profiles"] == sets[0]
    assert [[(p["min"][0], p["opt"][0], p["max"][0]) for p in s] for s in sets] == [
        [(lo, hi, hi)] * 2 for lo, hi in BUCKETS]


def test_the_fallback_runs_calls_in_each_profile(exported_3, allow_fallback):
    from executorch.runtime import Runtime
    import executorch_tensorrt  # noqa: F401 - registers the backend

    path, _ = exported_3
    method = Runtime.get().load_program(str(path)).load_method("forward")
    for rows in (1, 5, 16, 17, 200, 257, 2048):
        x, y = torch.randn(rows, 3), torch.randn(rows, 3)
        (out,) = method.execute([x, y])
        np.testing.assert_allclose(out.numpy(), AddScaled()(x, y).numpy(), rtol=1e-6)


MODEL_FILE = """
import torch

class Double(torch.nn.Module):
    def forward(self, x):
        return (x * 2).relu()

def make():
    return Double(), (torch.ones(4, 3),)
"""


def run_cli(args, monkeypatch):
    """The command line in this process (helpers.cli_main): (exit code,
    stderr), with none of the package's variables set, as a user's shell
    would have it."""
    for name in [k for k in os.environ if k.startswith("EXECUTORCH_TENSORRT_")]:
        monkeypatch.delenv(name)
    code, _, err = cli_main(*args)
    return code, err


@pytest.mark.parametrize("flags, buckets", [
    (["--profiles", "3"], BUCKETS),
    (["--profile", "0:0=1:16:16", "--profile", "input0_dim0=17:2048:2048"],
     [(1, 16), (17, 2048)])])
def test_cli_export_with_profiles(tmp_path, flags, buckets, monkeypatch):
    (tmp_path / "double.py").write_text(textwrap.dedent(MODEL_FILE))
    out = tmp_path / "double.pte"
    code, err = run_cli(["export", f"{tmp_path / 'double.py'}:make", str(out), "--dynamic",
                         "0:0:1:2048", "--no-reference", *flags], monkeypatch)
    assert code == 0, err
    sets = read_blob(tensorrt_blobs(out)[0]).metadata["optimization_profiles"]
    assert [(s[0]["min"][0], s[0]["max"][0]) for s in sets] == buckets


@pytest.mark.parametrize("flags, message", [
    (["--profiles", "0"], "--profiles 0: the number of optimization profiles must be 1 to 16"),
    (["--profile", "batch=1:8"], "expected DIM=MIN:OPT:MAX"),
    (["--profiles", "2", "--profile", "0:0=1:2:2"], "use one of them")])
def test_cli_refuses_bad_profile_flags(tmp_path, flags, message, monkeypatch):
    code, err = run_cli(["export", "--example", "add", str(tmp_path / "a.pte"), *flags],
                        monkeypatch)
    assert code != 0 and message in err, err
    assert not (tmp_path / "a.pte").exists()


def test_the_compile_spec_carries_profiles_through_executorch():
    from executorch_tensorrt.aot.compile_spec import TensorRTCompileSpec

    for option in (None, 3, [{BATCH: (1, 8, 16), "x:1": (3, 3, 3)}, {"$s17": (17, 20, 30)}]):
        spec = TensorRTCompileSpec(profiles=option)
        again = TensorRTCompileSpec.from_compile_specs(spec.to_compile_specs())
        assert again == spec and hash(again) == hash(spec)
    with pytest.raises(ValueError, match="profiles=0"):
        TensorRTCompileSpec(profiles=0)


def test_prefill_and_decode_profiles_of_a_decoder_with_its_kv_cache(allow_fallback, tmp_path,
                                                                    monkeypatch):
    """The case several profiles are for: decode steps of one token and
    prompts of many, with the cache owned by the partition (state.py)."""
    import copy

    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
    from executorch_tensorrt.llm.greedy_decode import greedy_decode
    from executorch_tensorrt.examples import llm as lm

    torch.manual_seed(0)
    model = lm.CachedDecoder().eval().requires_grad_(False)
    eager = copy.deepcopy(model)
    partitioner = TensorRTPartitioner(progress=None, inline_weights=True,
                                      profiles=[{"seq": (1, 1, 1)}, {"seq": (2, 8, 16)}])
    program = to_edge_transform_and_lower(
        lm.export_cached_decoder(model), partitioner=[partitioner],
        compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    blobs = [read_blob(b) for b in tensorrt_blobs(program.buffer)]
    with_state = [b.metadata for b in blobs if b.metadata.get("state")]
    assert with_state and all(len(m["optimization_profiles"]) == 2 for m in with_state)
    tokens = next(p for p in with_state[0]["optimization_profiles"][1] if len(p["min"]) == 2)
    assert (tokens["min"], tokens["opt"], tokens["max"]) == ([1, 2], [1, 8], [1, 16])
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    prompt = list(range(3, 11))
    assert greedy_decode(method, prompt, 8).tokens == greedy_decode(eager, prompt, 8).tokens
    # The rebuild at load: both profiles, the cache inputs (absent from the
    # profiles: their shapes are static) at their shapes.
    from executorch_tensorrt.blob import write_blob
    from executorch_tensorrt.runtime.tensorrt.portability import rebuilt_engine
    from executorch_tensorrt.tensorrt import engine_builder

    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(tmp_path))
    blob = next(b for b in blobs if b.metadata.get("state"))
    stale = read_blob(write_blob(blob.engine, dict(blob.metadata, trt_version="0.1.2"),
                                 onnx=blob.onnx))
    engine = rebuilt_engine(stale, load_tensorrt(), "SM89")
    built = [b for b in engine_builder._cache.values() if b.engine == engine]
    assert built and built[0].optimization_profiles == 2
