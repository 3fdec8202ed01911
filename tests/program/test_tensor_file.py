"""Tensor files (ETTENSR1) and the whole-tensor comparison, without a program."""
from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from executorch_tensorrt.program import tensor_file as tf
from executorch_tensorrt.program.compare import compare_arrays
from executorch_tensorrt.cli.runner import pattern_tensor

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_keeps_every_bit(dtype, tmp_path):
    base = torch.linspace(-3, 3, 24).reshape(2, 3, 4)
    t = (base > 0) if dtype == torch.bool else base.to(dtype)
    path = tf.write_tensors(tmp_path / "t.etensors", [tf.from_torch("output.0", t),
                                                      tf.from_torch("scalar", t.sum())])
    (a, b) = tf.read_tensors(path)
    assert a.shape == [2, 3, 4] and b.shape == []
    assert torch.equal(tf.to_torch(a), t)
    if dtype.is_floating_point:
        np.testing.assert_array_equal(a.as_float64(), t.to(torch.float64).numpy())


def test_non_contiguous_tensor_is_stored_in_logical_order(tmp_path):
    t = torch.arange(6.0).reshape(2, 3).t()
    (s,) = tf.read_tensors(tf.write_tensors(tmp_path / "t", [tf.from_torch("x", t)]))
    np.testing.assert_array_equal(s.array, t.numpy())


def _file(tmp_path, body: bytes, count=1, magic=tf.MAGIC, version=1):
    path = tmp_path / "bad.etensors"
    path.write_bytes(magic + struct.pack("<II", version, count) + body)
    return path


def _tensor(name=b"x", code=6, sizes=(2,), nbytes=None, data=None):
    data = data if data is not None else b"\0" * (4 * int(np.prod(sizes)))
    nbytes = len(data) if nbytes is None else nbytes
    return (struct.pack("<I", len(name)) + name + struct.pack("<II", code, len(sizes))
            + struct.pack(f"<{len(sizes)}q", *sizes) + struct.pack("<Q", nbytes) + data)


@pytest.mark.parametrize("make, message", [
    (lambda p: _file(p, _tensor(), magic=b"NOTMAGIC"), "not a tensor file"),
    (lambda p: _file(p, _tensor(), version=2), "version 2"),
    (lambda p: _file(p, _tensor(), count=2), "truncated"),
    (lambda p: _file(p, _tensor(code=99)), "dtype code 99"),
    (lambda p: _file(p, _tensor(sizes=(1,) * 17, data=b"\0" * 4)), "rank 17"),
    (lambda p: _file(p, _tensor(sizes=(-2,), data=b"")), "negative size"),
    (lambda p: _file(p, _tensor(nbytes=4)), "records 4 bytes, its shape needs 8"),
    (lambda p: _file(p, _tensor()[:-3]), "truncated"),
    (lambda p: _file(p, _tensor() + b"xx"), "stray bytes"),
])
def test_malformed_files_are_refused_with_the_reason(tmp_path, make, message):
    with pytest.raises(tf.TensorFileError, match=message):
        tf.read_tensors(make(tmp_path))


def test_well_formed_hand_written_file_reads(tmp_path):
    (t,) = tf.read_tensors(_file(tmp_path, _tensor(data=struct.pack("<2f", 1.5, -2))))
    assert t.dtype == "float32" and t.array.tolist() == [1.5, -2.0]


def test_select_requires_consecutive_indices():
    ts = [tf.Tensor(n, "float32", np.zeros(1, np.float32)) for n in ("input.0", "input.2")]
    with pytest.raises(tf.TensorFileError, match="numbered"):
        tf.select(ts, "input")


def test_compare_reports_worst_count_and_locations():
    e = np.zeros((3, 4))
    a = e.copy()
    a[0, 1], a[2, 3], a[1, 0] = 1e-3, -0.5, np.nan
    r = compare_arrays("o", e, a, atol=1e-4, rtol=0)
    assert not r.ok and r.mismatches == 3 and r.numel == 12
    assert r.worst_index == (1, 0)  # NaN against a number is the worst
    assert [loc[0] for loc in r.locations] == [(0, 1), (1, 0), (2, 3)]
    assert compare_arrays("o", e, e, 0, 0).ok


def test_pattern_inputs_are_not_constant_and_exact_in_every_float_type():
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        for width in (1, 2, 17, 251, 256):
            values = pattern_tensor("input.0", dtype, [4, width]).as_float64()
            assert len(set(values.ravel().tolist())) > 1
            # no row repeats another, whatever the width (batch-order bugs show)
            assert len({row.tobytes() for row in values}) == 4 or width == 1
        values = pattern_tensor("input.0", dtype, [1000]).as_float64()
        np.testing.assert_array_equal(values * 128, np.round(values * 128))
        assert values.min() < -0.9 and values.max() > 0.9
