"""check_args is the one gate: it returns one CheckedCall per call (the inputs'
shapes, byte sizes, dim orders, and which are permuted) that both executors
read, and a second call with the same arguments gets the same answer from
its cache."""
from __future__ import annotations

import numpy as np

from helpers import Args

from executorch_tensorrt.runtime.arguments import CheckedCall, check_args, split_bindings

META = {"io_bindings": [
    {"name": "x", "dtype": "float32", "shape": [-1, 3], "is_input": True},
    {"name": "y", "dtype": "float32", "shape": [3, 2], "is_input": True},
    {"name": "z", "dtype": "float32", "shape": [-1, 2], "is_input": False}]}


def test_one_value_per_call():
    inputs, outputs = split_bindings(META)
    a = Args()
    args = a.array(a.tensor(np.ones(12, np.float32), is_input=True, shape=(4, 3)),
                   a.tensor(np.ones(6, np.float32), is_input=True, shape=(3, 2),
                            dim_order=(1, 0)),
                   a.tensor(np.zeros(8, np.float32), is_input=False, shape=(4, 2)))
    call = check_args(args, 3, inputs, outputs, permuted_inputs=True)
    assert call == CheckedCall(shapes=((4, 3), (3, 2)), nbytes=(48, 24),
                               dim_orders=((0, 1), (1, 0)), permuted=(False, True))
    assert call.any_permuted
    assert check_args(args, 3, inputs, outputs, permuted_inputs=True) == call  # cached
