"""The executors check every argument against its binding before touching memory.

These call the onnxruntime executor DIRECTLY with etrt_arg structs over real
numpy buffers, as the adapter would pass them for a crafted program:
ExecuTorch's own checks run first in a real load, so runtime-level tests never
reach these. The blob is a real one (the `add` example, exported through
TensorRTBackend.preprocess): input `arg_0` and output `add`, float32 [2, 3].
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor
from helpers import Args, tensorrt_blobs

FLOAT32, UINT8, INT32 = 6, 0, 3
CANARY = 0xAB


@pytest.fixture(scope="module")
def add_blob(tmp_path_factory):
    import executorch_tensorrt
    from executorch_tensorrt.examples.models import example

    model, inputs = example("add")
    path = executorch_tensorrt.export(model, inputs, tmp_path_factory.mktemp("a") / "add.pte",
                                      progress=None)
    return read_blob(tensorrt_blobs(path)[0])


@pytest.fixture(params=["zero-copy", "staged"])
def executor(request, add_blob):
    ex = OnnxRuntimeExecutor(add_blob)
    assert ex.fixed_outputs
    # With outputs of unknown shape onnxruntime allocates them and the result is copied in.
    ex.fixed_outputs = request.param == "zero-copy"
    return ex


def guarded(nbytes: int, spare: int = 64) -> np.ndarray:
    """A byte buffer of `nbytes` followed by `spare` canary bytes."""
    return np.full(nbytes + spare, CANARY, dtype=np.uint8)


def test_valid_arguments_run(executor):
    a = Args()
    x, out = np.arange(6, dtype=np.float32), np.zeros(6, dtype=np.float32)
    executor.execute(a.array(a.tensor(x, is_input=True), a.tensor(out, is_input=False)), 2)
    assert np.array_equal(out, x + 1)


def test_uint8_output_where_the_blob_says_float32_is_not_overflowed(executor):
    """The heap overflow of issue #9: a crafted program passes a uint8 output of
    6 bytes where the binding says float32 [2, 3] (24 bytes); onnxruntime bound
    it at the data pointer with the blob's dtype and wrote 24 bytes."""
    a = Args()
    x = np.ones(6, dtype=np.float32)
    out = guarded(6)
    args = a.array(a.tensor(x, is_input=True),
                   a.tensor(out, is_input=False, dtype=UINT8, nbytes=6))
    with pytest.raises(ArgumentError, match=r"output 0 \('add'\) has dtype torch.uint8, the "
                       r"partition expects torch.float32"):
        executor.execute(args, 2)
    assert (out == CANARY).all(), "the executor wrote into the output buffer"


def test_output_smaller_than_its_binding_is_refused(executor):
    a = Args()
    out = guarded(12)
    args = a.array(a.tensor(np.ones(6, np.float32), is_input=True),
                   a.tensor(out, is_input=False, nbytes=12))
    with pytest.raises(ArgumentError, match=r"output 0 \('add'\) needs 24 bytes .* its buffer "
                       "holds 12"):
        executor.execute(args, 2)
    assert (out == CANARY).all()


def test_input_smaller_than_its_shape_is_refused(executor):
    a = Args()
    args = a.array(a.tensor(np.ones(2, np.float32), is_input=True, nbytes=8),
                   a.tensor(np.zeros(6, np.float32), is_input=False))
    with pytest.raises(ArgumentError, match=r"input 0 \('arg_0'\) needs 24 bytes"):
        executor.execute(args, 2)


def test_input_dtype(executor):
    a = Args()
    args = a.array(a.tensor(np.ones(6, np.int32), is_input=True, dtype=INT32),
                   a.tensor(np.zeros(6, np.float32), is_input=False))
    with pytest.raises(ArgumentError, match=r"input 0 \('arg_0'\) has dtype torch.int32, the "
                       "partition expects torch.float32"):
        executor.execute(args, 2)


@pytest.mark.parametrize("which", ["input", "output"])
def test_rank(executor, which):
    a = Args()
    shapes = {"input": (6,), "output": (2, 3)} if which == "input" else {"input": (2, 3),
                                                                        "output": (6,)}
    out = guarded(24)
    args = a.array(a.tensor(np.ones(6, np.float32), is_input=True, shape=shapes["input"]),
                   a.tensor(out, is_input=False, shape=shapes["output"], nbytes=24))
    name = "input 0 \\('arg_0'\\)" if which == "input" else "output 0 \\('add'\\)"
    with pytest.raises(ArgumentError, match=f"{name} has rank 1 .* expects rank 2: \\[2, 3\\]"):
        executor.execute(args, 2)
    assert (out == CANARY).all()


def test_shape(executor):
    a = Args()
    args = a.array(a.tensor(np.ones(6, np.float32), is_input=True, shape=(3, 2)),
                   a.tensor(np.zeros(6, np.float32), is_input=False))
    with pytest.raises(ArgumentError, match=r"input 0 \('arg_0'\) has shape \[3, 2\], the "
                       r"partition expects \[2, 3\]"):
        executor.execute(args, 2)


def test_zero_size_tensor(executor):
    a = Args()
    out = guarded(0)
    args = a.array(a.tensor(np.ones(0, np.float32), is_input=True, shape=(0, 3)),
                   a.tensor(out, is_input=False, shape=(0, 3), nbytes=0))
    with pytest.raises(ArgumentError, match=r"input 0 \('arg_0'\) has shape \[0, 3\]"):
        executor.execute(args, 2)
    assert (out == CANARY).all()


def test_kind(executor):
    a = Args()
    args = a.array(a.tensor(np.ones(6, np.float32), is_input=True, kind=abi.ETRT_ARG_INT),
                   a.tensor(np.zeros(6, np.float32), is_input=False))
    with pytest.raises(ArgumentError, match=r"input 0 \('arg_0'\) is a int, the partition "
                       "expects a tensor"):
        executor.execute(args, 2)


def test_direction(executor):
    a = Args()
    args = a.array(a.tensor(np.ones(6, np.float32), is_input=True),
                   a.tensor(np.zeros(6, np.float32), is_input=True))
    with pytest.raises(ArgumentError, match=r"output 0 \('add'\) is passed as an input"):
        executor.execute(args, 2)


@pytest.mark.parametrize("num_args", [1, 3])
def test_argument_count(executor, num_args):
    a = Args()
    tensors = [a.tensor(np.ones(6, np.float32), is_input=True),
               a.tensor(np.zeros(6, np.float32), is_input=False),
               a.tensor(np.zeros(6, np.float32), is_input=False)]
    args = a.array(*tensors[:num_args])
    with pytest.raises(ArgumentError, match=f"passes {num_args} arguments, the partition has "
                       "1 inputs and 1 outputs"):
        executor.execute(args, num_args)


def test_permuted_input_is_read_in_its_dim_order(executor):
    """ExecuTorch may pass an input whose memory is in another dim order (a
    transposed or channels-last tensor): it is read as such, not as if it were
    contiguous (the add example computes x + 1 on [2, 3])."""
    a = Args()
    logical = np.arange(6, dtype=np.float32).reshape(2, 3)
    memory = np.ascontiguousarray(logical.T)  # dim order [1, 0]: dimension 1 outermost
    out = np.zeros(6, np.float32)
    executor.execute(a.array(a.tensor(memory, is_input=True, dim_order=(1, 0)),
                             a.tensor(out, is_input=False)), 2)
    assert np.array_equal(out.reshape(2, 3), logical + 1)


@pytest.mark.parametrize("is_input, order, message", [
    (False, (1, 0), r"output 0 \('add'\) has dim order \[1, 0\], the partition writes "
                    "contiguous tensors only"),
    (True, (0, 0), r"input 0 \('arg_0'\) has dim order \[0, 0\], the partition reads "
                   "contiguous tensors only"),
])
def test_dim_order_refused(executor, is_input, order, message):
    a = Args()
    x = a.tensor(np.ones(6, np.float32), is_input=True, dim_order=order if is_input else None)
    out = a.tensor(np.zeros(6, np.float32), is_input=False,
                   dim_order=None if is_input else order)
    with pytest.raises(ArgumentError, match=message):
        executor.execute(a.array(x, out), 2)


def test_null_data(executor):
    a = Args()
    args = a.array(a.tensor(np.ones(6, np.float32), is_input=True),
                   a.tensor(np.zeros(6, np.float32), is_input=False, data=None))
    with pytest.raises(ArgumentError, match=r"output 0 \('add'\) has no memory"):
        executor.execute(args, 2)


def test_an_argument_changed_after_a_good_call_is_checked_again(executor):
    """check_args remembers arguments that passed; a change to any field must
    not ride on that."""
    a = Args()
    x, out = np.ones(6, np.float32), guarded(24)
    args = a.array(a.tensor(x, is_input=True), a.tensor(out, is_input=False, nbytes=24))
    executor.execute(args, 2)
    out[:] = CANARY
    args[1].dtype, args[1].nbytes = UINT8, 6
    with pytest.raises(ArgumentError, match=r"output 0 \('add'\) has dtype torch.uint8"):
        executor.execute(args, 2)
    assert (out == CANARY).all()
    args[1].dtype, args[1].nbytes = FLOAT32, 24
    args[1].sizes[0] = 3  # the live sizes view: shape [3, 3]
    with pytest.raises(ArgumentError, match=r"output 0 \('add'\) has shape \[3, 3\]"):
        executor.execute(args, 2)
