"""The TensorRT executor's argument binding on a real GPU.

FAKE, labelled: no GPU reachable from this project runs a TensorRT engine
(TensorRT-RTX refuses the H200's compute capability 9.0; CI has no GPU), so
`StandInContext` takes the place of TensorRT's IExecutionContext, and only of
it. It records the shapes and addresses the executor binds and, on
execute_async_v3, computes the partition `out = 2 * x + y` with PyTorch on the
stream it is given, reading and writing the bound raw device addresses, as an
engine would. Everything else is real: CUDA memory, the executor's stream,
its staging of host arguments through device buffers and the copies back.

Runs where CUDA PyTorch sees a GPU (it ran on the H200:
docs/gpu-runtime.md); skips elsewhere, saying so. The stand-in is shared with
the other tests/runtime/test_tensorrt_*_gpu.py files.
"""
from __future__ import annotations

import ctypes

import pytest
import torch

from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.tensorrt.context import BoundContext

SHAPE = (2, 3)
METADATA = {"io_bindings": [
    {"name": "x", "dtype": "float32", "shape": list(SHAPE), "is_input": True},
    {"name": "y", "dtype": "float32", "shape": list(SHAPE), "is_input": True},
    {"name": "out", "dtype": "float32", "shape": list(SHAPE), "is_input": False},
]}

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (device memory and streams)")


def device_view(address: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor over raw device memory (no copy)."""
    class Raw:
        __cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (address, False),
                                    "version": 2, "strides": None}
    return torch.as_tensor(Raw(), device="cuda")


class StandInContext:
    """FAKE IExecutionContext (see the module docstring): out = 2 * x + y.

    Counts the calls the executor makes into it (`calls`), records whether
    each enqueue ran under a CUDA graph capture (`captured`), and, given
    device memory (set_device_memory), computes through it as scratch, so
    two contexts sharing that memory at once would corrupt each other.
    `sleep_cycles`: GPU cycles the engine spins before writing its output.
    `capturable`: False makes it say so through is_stream_capturable;
    "refuse" makes its enqueue return False while being captured.
    `profiles`: per optimization profile, the (min, max) rows of every input;
    like TensorRT, it then refuses shapes outside the active profile, and a
    switch (set_optimization_profile_async, recorded in `profile_switches`)
    forgets the shapes and addresses set before it."""

    def __init__(self, sleep_cycles: int = 1_000_000, capturable=True,
                 profiles: list[tuple[int, int]] | None = None) -> None:
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.streams: list[int] = []
        self.captured: list[bool] = []
        self.calls = {"set_input_shape": 0, "set_tensor_address": 0, "get_tensor_shape": 0,
                      "set_device_memory": 0}
        self.device_memory: tuple[int, int] | None = None
        self.sleep_cycles = sleep_cycles
        self.capturable = capturable
        self._views: dict[tuple, torch.Tensor] = {}
        self.profiles = profiles
        self.profile = 0
        self.profile_switches: list[tuple[int, int]] = []  # (index, stream)
        self.ran_in: list[int] = []  # the active profile of each enqueue

    def set_optimization_profile_async(self, index, stream) -> bool:
        self.profile_switches.append((index, stream))
        if not 0 <= index < len(self.profiles or [None]):
            return False
        self.profile = index
        self.shapes.clear()  # TensorRT wants them set again in the new profile
        self.addresses.clear()
        return True

    def set_input_shape(self, name, shape) -> bool:
        self.calls["set_input_shape"] += 1
        if self.profiles is not None:
            lo, hi = self.profiles[self.profile]
            if not lo <= shape[0] <= hi:
                return False
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        self.calls["get_tensor_shape"] += 1
        assert name == "out"
        return self.shapes["x"]

    def set_tensor_address(self, name, address) -> bool:
        self.calls["set_tensor_address"] += 1
        self.addresses[name] = address
        return True

    def set_device_memory(self, address, size) -> None:
        self.calls["set_device_memory"] += 1
        self.device_memory = (address, size)

    def is_stream_capturable(self, stream) -> bool:
        return self.capturable is not False

    def view(self, address: int, shape: tuple[int, ...]) -> torch.Tensor:
        key = (address, shape)  # made outside captures (the first call is never captured)
        if key not in self._views:
            self._views[key] = device_view(address, shape)
        return self._views[key]

    def reset_calls(self) -> None:
        for k in self.calls:
            self.calls[k] = 0

    def execute_async_v3(self, stream: int) -> bool:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            capturing = torch.cuda.is_current_stream_capturing()  # the stream it was given
            self.streams.append(stream)
            self.captured.append(capturing)
            self.ran_in.append(self.profile)
            if capturing and self.capturable == "refuse":
                return False
            shape = self.shapes["x"]
            x, y, out = (self.view(self.addresses[n], shape) for n in ("x", "y", "out"))
            if self.device_memory is not None:  # through the scratch area
                tmp = self.view(self.device_memory[0], shape)
                torch.mul(x, 2, out=tmp)
                torch.cuda._sleep(self.sleep_cycles)  # another user of tmp would land here
                torch.add(tmp, y, out=out)
            else:
                # Slow enough that a missing wait on this stream shows up as stale output.
                torch.cuda._sleep(self.sleep_cycles)
                torch.add(y, x, alpha=2, out=out)
        return True


def arg(tensor: torch.Tensor, is_input: bool, keep: list, dtype: int = 6) -> abi.EtrtArg:
    """An etrt_arg as the adapter builds it, over `tensor`'s memory."""
    sizes = (ctypes.c_int32 * tensor.dim())(*tensor.shape)
    order = (ctypes.c_uint8 * tensor.dim())(*range(tensor.dim()))
    keep += [tensor, sizes, order]
    a = abi.EtrtArg()
    a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), abi.ETRT_ARG_TENSOR, is_input, dtype
    a.data, a.nbytes, a.ndim = tensor.data_ptr(), tensor.nbytes, tensor.dim()
    on_gpu = tensor.device.type == "cuda"
    a.device_type = abi.ETRT_DEVICE_CUDA if on_gpu else abi.ETRT_DEVICE_CPU
    a.device_index = tensor.device.index or 0
    a.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
    a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
    return a


def run(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, context=None):
    context = context or StandInContext()
    inputs, outputs = split_bindings(METADATA)
    bound = BoundContext(context, inputs, outputs, 0)  # CUDA device 0
    keep: list = []
    args = (abi.EtrtArg * 3)(arg(x, True, keep), arg(y, True, keep), arg(out, False, keep))
    bound.execute(args)
    return bound, context


def test_device_arguments_are_bound_at_their_own_addresses():
    x = torch.arange(6, dtype=torch.float32, device="cuda").view(SHAPE)
    y = torch.full(SHAPE, 0.5, device="cuda")
    out = torch.zeros(SHAPE, device="cuda")
    bound, context = run(x, y, out)
    assert context.addresses == {"x": x.data_ptr(), "y": y.data_ptr(), "out": out.data_ptr()}
    assert bound.staging == {}, "a device-resident argument was staged"
    assert context.streams == [bound.stream.handle]
    # execute returned, so the output must be complete without any further sync.
    assert torch.equal(out.cpu(), (2 * x + y).cpu())


def test_host_arguments_are_staged_and_copied_back():
    x = torch.arange(6, dtype=torch.float32).view(SHAPE)
    y = torch.full(SHAPE, -1.0)
    out = torch.zeros(SHAPE)
    bound, context = run(x, y, out)
    staged = {name: buf.address for name, buf in bound.staging.items()}
    assert set(staged) == {"x", "y", "out"} and context.addresses == staged
    assert context.shapes == {"x": SHAPE, "y": SHAPE}
    assert torch.equal(out, 2 * x + y)


def test_mixed_arguments():
    x = torch.ones(SHAPE, device="cuda")
    y = torch.arange(6, dtype=torch.float32).view(SHAPE)
    out = torch.zeros(SHAPE, device="cuda")
    bound, context = run(x, y, out)
    assert set(bound.staging) == {"y"}
    assert context.addresses["x"] == x.data_ptr() and context.addresses["out"] == out.data_ptr()
    assert torch.equal(out.cpu(), 2 * x.cpu() + y)


def test_inputs_written_on_the_default_stream_are_waited_for():
    """The caller's last write to an input is still queued on the default
    stream when execute starts; the engine must see it."""
    x = torch.zeros(SHAPE, device="cuda")
    y = torch.zeros(SHAPE, device="cuda")
    out = torch.zeros(SHAPE, device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(5_000_000)  # on the default stream: delays the write below
    x.fill_(3.0)
    run(x, y, out)
    assert torch.equal(out.cpu(), torch.full(SHAPE, 6.0))


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_output_of_another_dtype_is_refused_before_binding(device):
    """A crafted program's uint8 output (6 bytes) where the engine writes
    float32 [2, 3] (24 bytes): refused before any address reaches the engine."""
    x = torch.ones(SHAPE, device=device)
    y = torch.ones(SHAPE, device=device)
    out = torch.zeros(SHAPE, dtype=torch.uint8, device=device)
    context = StandInContext()
    inputs, outputs = split_bindings(METADATA)
    bound = BoundContext(context, inputs, outputs, 0)
    keep: list = []
    args = (abi.EtrtArg * 3)(arg(x, True, keep), arg(y, True, keep),
                             arg(out, False, keep, dtype=0))
    with pytest.raises(ArgumentError, match=r"output 0 \('out'\) has dtype torch.uint8"):
        bound.execute(args)
    assert context.addresses == {} and context.streams == []
