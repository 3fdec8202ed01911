"""Executors over named-data weights, at the executor level (the adapter's
path is in test_named_data_program.py): the onnxruntime fallback reads the
weights where they lie (zero-copy, shown by changing them after the session
exists) unless the partition is small enough to prepack, upcasts fp16 into arrays it owns, and refuses missing or
mismatched named data by name; the TensorRT side builds an "engine": "none"
partition from the weightless ONNX plus the weights by address, and refits a
stripped engine in TensorRT's order (through a stand-in refitter: refitting
needs a GPU)."""
from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import named_data_programs as nd
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.errors import (ArgumentError, InvalidProgramError, NamedDataError,
                                       RebuildImpossible)
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.tensorrt.portability import rebuilt_engine
from executorch_tensorrt.runtime.tensorrt.refit import refit_engine
from executorch_tensorrt.runtime.choose import create_executor
from executorch_tensorrt.runtime.named_data import InMemoryNamedData, blob_weights
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor
from executorch_tensorrt.runtime.onnxruntime import named_weights
from executorch_tensorrt.runtime.onnxruntime import where_used
from executorch_tensorrt.runtime.onnxruntime.named_weights import PREPACK_ENV
from executorch_tensorrt.tensorrt.flavor import load_tensorrt
from executorch_tensorrt.tensorrt.engine_builder import build_engine
from executorch_tensorrt.tensorrt.onnx_parser import parse_network
from executorch_tensorrt.tensorrt.options import BuildOptions

X = np.arange(8, dtype=np.float32).reshape(nd.X_SHAPE) / 8


class Args:
    """ExecuTorch-style arguments (EtrtArg) over numpy arrays: x in, y out."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.keep = []
        self.array = (abi.EtrtArg * 2)()
        for slot, (arr, is_input) in zip(self.array, ((x, 1), (y, 0))):
            sizes = (ctypes.c_int32 * arr.ndim)(*arr.shape)
            order = (ctypes.c_uint8 * arr.ndim)(*range(arr.ndim))
            self.keep += [sizes, order]
            slot.struct_size = ctypes.sizeof(abi.EtrtArg)
            slot.kind, slot.is_input = abi.ETRT_ARG_TENSOR, is_input
            slot.dtype = {np.float32: 6, np.float16: 5}[arr.dtype.type]
            slot.data, slot.nbytes, slot.ndim = arr.ctypes.data, arr.nbytes, arr.ndim
            slot.sizes, slot.dim_order = sizes, order


def run(executor, x: np.ndarray) -> np.ndarray:
    y = np.zeros((nd.X_SHAPE[0], nd.W_SHAPE[1]), dtype=x.dtype)
    args = Args(x, y)
    executor.execute(args.array, 2)
    return y


def fallback(dtype="float32", **kw):
    w, b = nd.weights(dtype)
    backing = w.copy()  # the "named data": mutated below to prove nothing was copied
    blob = read_blob(nd.named_blob(w, b, dtype, **kw))
    named = InMemoryNamedData({nd.key_of(w.tobytes()): backing})
    return blob, named, backing, b


def test_onnxruntime_reads_the_weights_in_place(monkeypatch):
    """A partition over the prepacking limit (here: any) reads its weights in place."""
    monkeypatch.delenv(PREPACK_ENV, raising=False)
    monkeypatch.setattr(named_weights, "PREPACK_LIMIT", 0)
    blob, named, backing, b = fallback()
    executor = create_executor(blob, "onnxruntime", named)  # the path init takes
    assert executor.kind == "onnxruntime" and executor.weights.copied_bytes == 0
    np.testing.assert_allclose(run(executor, X), X @ backing + b, rtol=1e-6)
    backing *= 2  # after the session was created
    np.testing.assert_allclose(run(executor, X), X @ backing + b, rtol=1e-6)
    executor.close()


def test_prepacking_option_packs_a_copy(monkeypatch):
    """EXECUTORCH_TENSORRT_ORT_PREPACK=1: onnxruntime packs the MatMul weight
    once, so a later change of the named data is not seen (the trade-off the
    option documents)."""
    monkeypatch.setenv(PREPACK_ENV, "1")
    blob, named, backing, b = fallback()
    executor = OnnxRuntimeExecutor(blob, named)
    before = X @ backing + b
    backing *= 2
    np.testing.assert_allclose(run(executor, X), before, rtol=1e-6)
    executor.close()


def packed(executor, backing: np.ndarray, b: np.ndarray) -> bool:
    """True when onnxruntime packed its own copy of the weight: a change of the
    named data after the session was made is not seen."""
    before = X @ backing + b
    backing *= 2
    got = run(executor, X)
    executor.close()
    if np.allclose(got, before, rtol=1e-6):
        return True
    np.testing.assert_allclose(got, X @ backing + b, rtol=1e-6)
    return False


@pytest.mark.parametrize("env,limit,want", [
    ("", None, True),     # unset: a partition within PREPACK_LIMIT is packed
    ("", 0, False),       # unset: one over it keeps one copy
    ("0", None, False),   # 0: never
    ("1", 0, True),       # 1: always
])
def test_prepacking_by_size_and_by_choice(monkeypatch, env, limit, want):
    monkeypatch.setenv(PREPACK_ENV, env)
    if limit is not None:
        monkeypatch.setattr(named_weights, "PREPACK_LIMIT", limit)
    blob, named, backing, b = fallback()
    executor = OnnxRuntimeExecutor(blob, named)
    assert executor.weights.packable_bytes == backing.nbytes  # the MatMul's weight, not b
    assert packed(executor, backing, b) is want


def test_a_bad_prepacking_choice_is_refused(monkeypatch):
    monkeypatch.setenv(PREPACK_ENV, "maybe")
    blob, named, _, _ = fallback()
    with pytest.raises(ArgumentError, match=f"{PREPACK_ENV}='maybe' is not a prepacking"):
        OnnxRuntimeExecutor(blob, named)


def test_fp16_weights_are_upcast_into_owned_arrays(monkeypatch):
    monkeypatch.delenv(where_used.UPCAST_ENV, raising=False)
    blob, named, backing, b = fallback("float16")
    executor = OnnxRuntimeExecutor(blob, named)
    assert executor.weights.copied_bytes == backing.size * 4  # the upcast copy, fp32
    expected = X @ backing.astype(np.float32) + b.astype(np.float32)
    np.testing.assert_allclose(run(executor, X), expected, rtol=2e-3, atol=2e-3)
    executor.close()


@pytest.mark.parametrize("env,limit", [("where-used", None), ("", 0)])
def test_fp16_weights_cast_where_used_are_read_in_place(monkeypatch, env, limit):
    """Cast where used (by choice, or over UPCAST_COPY_LIMIT): no upcast copy,
    and onnxruntime neither folds the Cast into an fp32 copy nor copies the
    weight: a change of the named data after the session exists is seen."""
    monkeypatch.setenv(where_used.UPCAST_ENV, env)
    if limit is not None:
        monkeypatch.setattr(where_used, "UPCAST_COPY_LIMIT", limit)
    blob, named, backing, b = fallback("float16")
    executor = OnnxRuntimeExecutor(blob, named)
    assert executor.weights.copied_bytes == 0 and executor.weights.where_used == {"W"}
    for _ in range(2):  # the weight as given, then changed in place
        expected = X @ backing.astype(np.float32) + b.astype(np.float32)
        np.testing.assert_allclose(run(executor, X), expected, rtol=2e-3, atol=2e-3)
        backing *= 2
    executor.close()


def test_a_bad_upcast_choice_is_refused(monkeypatch):
    monkeypatch.setenv(where_used.UPCAST_ENV, "later")
    blob, named, _, _ = fallback("float16")
    with pytest.raises(ArgumentError,
                       match=f"{where_used.UPCAST_ENV}='later' is not an upcast"):
        OnnxRuntimeExecutor(blob, named)


def test_missing_named_data_names_weight_key_and_ptd():
    blob, _, _, _ = fallback()
    key = blob.weights[0]["key"]
    for executor_name in ("onnxruntime", None):
        with pytest.raises(NamedDataError, match=rf"not supplied \(weight 'W', key '{key}'.*"
                                                 r"pass the \.ptd"):
            create_executor(blob, executor_name)
    with pytest.raises(NamedDataError, match=rf"weight 'W'.*no key '{key}'"):
        create_executor(blob, "onnxruntime", InMemoryNamedData({"etrt.other": b"x"}))


def test_named_data_of_another_size_is_refused_before_use():
    blob, _, backing, _ = fallback()
    short = InMemoryNamedData({blob.weights[0]["key"]: backing.tobytes()[:-4]})
    with pytest.raises(NamedDataError, match=r"weight 'W' \(float32 \[4, 12\]\).* holds 188 "
                                             r"bytes, but the blob records 192"):
        create_executor(blob, "onnxruntime", short)


# ---- TensorRT ------------------------------------------------------------------

def test_engine_none_is_built_from_the_weightless_graph_and_named_data(tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(tmp_path / "cache"))
    blob, named, backing, b = fallback()
    trt = load_tensorrt()
    weights = blob_weights(blob, named)
    # The network TensorRT builds from (graph + weights by address) has the blob's I/O.
    _, network, _parser, _ = parse_network(trt, blob.onnx,
                                           [(w.name, w.address, w.nbytes) for w in weights])
    io = ([(network.get_input(i).name, tuple(network.get_input(i).shape))
           for i in range(network.num_inputs)],
          [(network.get_output(i).name, tuple(network.get_output(i).shape))
           for i in range(network.num_outputs)])
    assert io == ([("x", nd.X_SHAPE)], [("y", (nd.X_SHAPE[0], nd.W_SHAPE[1]))])
    engine = rebuilt_engine(blob, trt, "SM89", weights)
    # The very plan TensorRT builds from the same model with W inside it.
    inline = onnx.load_model_from_string(blob.onnx)
    inline.graph.initializer[0].CopyFrom(numpy_helper.from_array(backing, "W"))
    reference = build_engine(inline.SerializeToString(),
                             BuildOptions(compute_capabilities=("SM89",), precision="fp32"),
                             progress=None, trt=trt).engine
    assert engine == reference
    cached = list((tmp_path / "cache").glob("*.engine"))
    assert len(cached) == 1
    # Other weights (another key) are another engine, never the cached one.
    w2, _ = nd.weights(seed=1)
    blob2 = read_blob(nd.named_blob(w2, b))
    rebuilt_engine(blob2, trt, "SM89",
                   blob_weights(blob2, InMemoryNamedData({nd.key_of(w2.tobytes()): w2})))
    assert len(list((tmp_path / "cache").glob("*.engine"))) == 2


def test_engine_none_without_named_data_is_refused():
    blob, _, _, _ = fallback()
    with pytest.raises(RebuildImpossible, match="lists 1 weights in named data, 0 were supplied"):
        rebuilt_engine(blob, load_tensorrt(), "SM89", [])


class StandInRefitter:
    """STAND-IN for TensorRT's Refitter + OnnxParserRefitter (refitting needs a
    GPU): records what refit_engine hands TensorRT, in order."""

    def __init__(self, missing=(), refuse=None):
        self.calls, self.missing, self.refuse = [], list(missing), refuse
        outer = self

        class Refitter:
            def __init__(self, engine, logger):
                outer.calls.append(("Refitter", engine))

            def get_missing_weights(self):
                return outer.missing

            def refit_cuda_engine(self):
                outer.calls.append(("refit_cuda_engine",))
                return True

        class OnnxParserRefitter:
            num_errors = 0

            def __init__(self, refitter, logger):
                outer.calls.append(("OnnxParserRefitter",))

            def load_model_proto(self, data):
                outer.calls.append(("load_model_proto", bytes(data)))
                return True

            def load_initializer(self, name, address, nbytes):
                outer.calls.append(("load_initializer", name, address,
                                    ctypes.string_at(address, nbytes)))
                return name != outer.refuse

            def refit_model_proto(self):
                outer.calls.append(("refit_model_proto",))
                return True

        self.module = type("module", (), {"Refitter": Refitter,
                                          "OnnxParserRefitter": OnnxParserRefitter})


def test_refit_hands_tensorrt_each_weight_by_address():
    blob, named, backing, _ = fallback()
    weights = blob_weights(blob, named)
    stand_in = StandInRefitter()
    refit_engine(stand_in, "ENGINE", blob.onnx, weights, logger=None)
    names = [c[0] for c in stand_in.calls]
    assert names == ["Refitter", "OnnxParserRefitter", "load_model_proto", "load_initializer",
                     "refit_model_proto", "refit_cuda_engine"]
    _, name, address, data = stand_in.calls[3]
    assert (name, address, data) == ("W", backing.ctypes.data, backing.tobytes())  # no copy
    with pytest.raises(InvalidProgramError, match=r"leaves engine weights \['W'\] unset"):
        refit_engine(StandInRefitter(missing=["W"]), "ENGINE", blob.onnx, weights, None)
    with pytest.raises(InvalidProgramError, match="refused weight 'W'"):
        refit_engine(StandInRefitter(refuse="W"), "ENGINE", blob.onnx, weights, None)


def test_init_args_from_an_older_adapter_have_no_named_data():
    """The fields are appended: an adapter whose etrt_init_args ends at
    `fallback` (struct_size says so) passes no lookup, and none is read."""
    args = abi.EtrtInitArgs()
    args.get_named_data = abi.GetNamedDataFn(lambda ctx, key, data, nbytes: 0)
    args.struct_size = abi.EtrtInitArgs.named_data_ctx.offset  # the struct before the append
    assert not args.has_named_data()
    args.struct_size = ctypes.sizeof(abi.EtrtInitArgs)
    assert args.has_named_data()
    args.get_named_data = abi.GetNamedDataFn()  # NULL
    assert not args.has_named_data()


def test_full_engine_needs_named_data_only_to_rebuild():
    """A blob with a full engine (weights inside the plan) and its ONNX weights
    in named data: without the .ptd the TensorRT executor still gets as far
    as the GPU check (the engine would run as is); "none" needs the weights
    first."""
    from executorch_tensorrt.errors import EngineUnavailable
    from executorch_tensorrt.runtime.tensorrt.executor import TensorRTExecutor

    w, b = nd.weights()
    full = read_blob(nd.named_blob(w, b, engine=b"\0" * 64, kind="full"))
    with pytest.raises(EngineUnavailable, match="CUDA driver"):
        TensorRTExecutor(full, None)
    with pytest.raises(NamedDataError, match="not supplied"):
        TensorRTExecutor(read_blob(nd.named_blob(w, b)), None)
