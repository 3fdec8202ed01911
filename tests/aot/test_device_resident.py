"""Device-resident programs (export(..., device_resident=True)): what runs on a CPU.

Export, the serialized record (`inspect --device-resident`), the refusals that
name an input or output, the adapter's CUDA device allocator (registered with
no CUDA present, failing clearly when used) and the onnxruntime executor's
staging refusal. Running such a program needs a GPU; see docs/device-resident.md.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.aot.compile_spec import TensorRTCompileSpec
from executorch_tensorrt.aot.checks.device_resident import target_device_spec
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.cli import main as cli_main
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.program.info import read_program
from helpers import child_env, identity_blob


class TwoInTwoOut(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x) + y * 2, x.sum(dim=1)


class ReluAround(torch.nn.Module):
    """With relu kept off TensorRT: the input feeds a host op, the output comes from one."""

    def forward(self, x):
        return torch.relu(torch.relu(x) * 2 + 1)


class SharedInput(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x), x * 2


INPUTS = (torch.randn(2, 3), torch.randn(2, 3))


def _export(tmp, name, model, inputs, **kw):
    return Path(executorch_tensorrt.export(model, inputs, tmp / f"{name}.pte", progress=None,
                                           **kw))


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """device-resident, normal, and one with target_device but ExecuTorch's default
    config (et_copy ops around the delegate, CUDA-planned buffers)."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from executorch_tensorrt.aot.checks.device_resident import place_on_device
    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner

    tmp = tmp_path_factory.mktemp("device_resident")
    out = {
        "resident": _export(tmp, "resident", TwoInTwoOut(), INPUTS, device_resident=True),
        "normal": _export(tmp, "normal", TwoInTwoOut(), INPUTS),
    }
    partitioner = TensorRTPartitioner(progress=None)
    place_on_device(partitioner)
    edge = to_edge_transform_and_lower(
        torch.export.export(TwoInTwoOut(), INPUTS), partitioner=[partitioner],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    out["copies"] = tmp / "copies.pte"
    out["copies"].write_bytes(edge.to_executorch().buffer)
    return out


def _inspect(path: Path, capsys) -> tuple[int, str]:
    code = cli_main(["inspect", "--device-resident", str(path)])
    return code, capsys.readouterr().out


# ---- export and what the program records ----------------------------------

def test_resident_program_records_cuda_io_and_no_copies(programs):
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.exir.schema import DeviceType

    program = deserialize_pte_binary(programs["resident"].read_bytes()).program
    (plan,) = program.execution_plan
    assert [op.name for op in plan.operators] == []
    for i in [*plan.inputs, *plan.outputs]:
        tensor = plan.values[i].val
        info = tensor.extra_tensor_info
        assert (info.device_type, info.device_index) == (DeviceType.CUDA, 0), info
        assert tensor.allocation_info is None  # the caller provides the memory
    (delegate,) = plan.delegates
    specs = {s.key: bytes(s.value) for s in delegate.compile_specs}
    assert delegate.id == "TensorRTBackend" and specs["target_device"] == b"cuda:0"
    (method,) = read_program(programs["resident"])
    assert [v.device for v in method.inputs + method.outputs] == ["cuda:0"] * 4


def test_device_id_goes_into_target_device(tmp_path):
    path = _export(tmp_path, "dev1", TwoInTwoOut(), INPUTS, device_resident=True, device_id=1)
    (method,) = read_program(path)
    assert [v.device for v in method.inputs + method.outputs] == ["cuda:1"] * 4


def test_compile_spec_accepts_target_device_and_checks_it():
    spec = TensorRTCompileSpec(device_id=2)
    specs = spec.to_compile_specs()
    assert TensorRTCompileSpec.from_compile_specs(specs + [target_device_spec(2)]) == spec
    with pytest.raises(ValueError, match="'cuda:0', but the engine is for device_id 2"):
        TensorRTCompileSpec.from_compile_specs(specs + [target_device_spec(0)])
    with pytest.raises(ValueError, match="unknown TensorRTBackend compile spec 'bogus'"):
        TensorRTCompileSpec.from_compile_specs(specs + [type(specs[0])("bogus", b"1")])


# ---- inspect --device-resident ---------------------------------------------

def test_inspect_passes_a_resident_program(programs, capsys):
    code, out = _inspect(programs["resident"], capsys)
    assert code == 0, out
    assert "input[0]: float32 [2, 3] on cuda:0" in out
    assert out.strip().endswith("device-resident: OK (no et_copy ops; every method input and "
                                "output is a CUDA tensor)")


def test_inspect_fails_a_normal_program_per_input_and_output(programs, capsys):
    code, out = _inspect(programs["normal"], capsys)
    assert code == 1
    fails = [line for line in out.splitlines() if line.startswith("device-resident: FAIL")]
    assert fails == [
        f"device-resident: FAIL: method forward: {kind}[{i}] (float32 {shape}) is recorded on "
        "cpu, not on a CUDA device"
        for kind, i, shape in (("input", 0, [2, 3]), ("input", 1, [2, 3]),
                               ("output", 0, [2, 3]), ("output", 1, [2]))], out
    # Without the flag, inspect only describes.
    assert cli_main(["inspect", str(programs["normal"])]) == 0


def test_inspect_fails_on_et_copy_ops(programs, capsys):
    code, out = _inspect(programs["copies"], capsys)
    assert code == 1
    assert ("device-resident: FAIL: method forward: the operator table has "
            "et_copy::_h2d_copy.out, et_copy::_d2h_copy.out") in out, out
    assert "is recorded on cpu" in out  # the copies' host side is what the method sees


def test_inspect_as_a_command(programs):
    exe = Path(sys.executable).with_name("executorch-tensorrt")
    ok = subprocess.run([str(exe), "inspect", "--device-resident", str(programs["resident"])],
                        capture_output=True, text=True, check=False)
    bad = subprocess.run([str(exe), "inspect", "--device-resident", str(programs["normal"])],
                         capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "device-resident: OK" in ok.stdout, ok.stdout + ok.stderr
    assert bad.returncode == 1 and bad.stdout.count("device-resident: FAIL") == 4, bad.stdout


# ---- export refusals -------------------------------------------------------

def test_input_and_output_on_host_ops_are_named(tmp_path):
    with pytest.raises(ExportError) as e:
        _export(tmp_path, "relu", ReluAround(), (torch.randn(4),), device_resident=True,
                exclude_ops={"aten.relu.default"})
    msg = str(e.value)
    assert "method 'forward' input 'x' feeds aten.relu.default (outside every CUDA delegate), " \
        "which runs on the host, so it would need a device-to-host copy" in msg, msg
    assert "method 'forward' output 0 is computed by aten.relu.default (outside every CUDA " \
        "delegate), on the host, so it would need a host-to-device copy" in msg, msg
    assert "Nothing was written" in msg
    assert not (tmp_path / "relu.pte").exists() and not list(tmp_path.iterdir())


def test_shared_input_is_named(tmp_path):
    with pytest.raises(ExportError) as e:
        _export(tmp_path, "shared", SharedInput(), (torch.randn(4),), device_resident=True,
                exclude_ops={"aten.relu.default"})
    assert ("method 'forward' input 'x' feeds 2 consumers (aten.relu.default (outside every "
            "CUDA delegate), a TensorRTBackend delegate on CUDA); a device-resident input must "
            "feed exactly one TensorRT delegate") in str(e.value), str(e.value)


def test_copies_inside_the_method_are_refused(tmp_path):
    from executorch_tensorrt.examples.models import example

    model, inputs = example("bitwise")  # int32 bitwise_and between TensorRT partitions
    with pytest.raises(ExportError) as e:
        _export(tmp_path, "bitwise", model, inputs, device_resident=True)
    msg = str(e.value)
    assert "delegate's output feeds aten.bitwise_and" in msg and "device-to-host copy" in msg, msg
    assert "feeds a TensorRTBackend delegate, which needs a host-to-device copy" in msg, msg
    assert not list(tmp_path.iterdir())


# ---- the adapter's CUDA device allocator (no CUDA on this machine) ------------

def _child(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=child_env(**env), timeout=300, check=False)


ALLOCATOR = """
import ctypes, executorch
from pathlib import Path
import executorch.runtime
lib = next(Path(p) / "lib" / "libexecutorch.so" for p in executorch.__path__
           if (Path(p) / "lib" / "libexecutorch.so").exists())
et = ctypes.CDLL(str(lib))
get = et._ZN10executorch7runtime20get_device_allocatorENS0_7etensor10DeviceTypeE
get.restype, get.argtypes = ctypes.c_void_p, [ctypes.c_int8]
print("BEFORE", bool(get(1)))
import executorch_tensorrt
print("AFTER", bool(get(1)), bool(get(0)))
"""


def test_cuda_allocator_registers_without_cuda():
    assert ctypes.util.find_library("cuda") is None, "this test expects a machine without CUDA"
    proc = _child(ALLOCATOR)
    assert proc.returncode == 0, proc.stderr
    assert "BEFORE False\nAFTER True False\n" in proc.stdout, proc.stdout + proc.stderr


def test_cuda_allocator_can_be_turned_off():
    proc = _child(ALLOCATOR, EXECUTORCH_TENSORRT_NO_CUDA_ALLOCATOR="1")
    assert proc.returncode == 0, proc.stderr
    assert "AFTER False False" in proc.stdout, proc.stdout


LOAD = """
import sys, torch, executorch_tensorrt
from executorch.runtime import Runtime
program = Runtime.get().load_program(sys.argv[1])
try:
    method = program.load_method("forward")
    method.execute([torch.ones(2, 3), torch.ones(2, 3)])
except RuntimeError as e:
    print("RAISED", e)
print("LAST", executorch_tensorrt.last_error())
"""


def _load(path: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True,
                          text=True, env=child_env(**env), timeout=300, check=False)


def test_cuda_planned_program_fails_to_load_saying_no_cuda(programs):
    proc = _load(programs["copies"], EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    assert proc.returncode == 0, proc.stderr  # a clear error, not a crash
    assert "RAISED Failed to allocate" in proc.stdout, proc.stdout
    want = "CUDA device allocator: cannot allocate 112 bytes on cuda:0: no CUDA driver " \
        "(libcuda.so.1 cannot be loaded"
    assert f"LAST {want}" in proc.stdout, proc.stdout
    assert f"[executorch_tensorrt] {want}" in proc.stderr, proc.stderr


def test_without_our_allocator_executorch_says_less(programs):
    proc = _load(programs["copies"], EXECUTORCH_TENSORRT_FALLBACK="onnxruntime",
                 EXECUTORCH_TENSORRT_NO_CUDA_ALLOCATOR="1")
    assert proc.returncode == 0, proc.stderr
    assert "No device allocator registered for device type 1" in proc.stderr, proc.stderr


def test_resident_program_on_the_fallback_says_no_cuda(programs):
    proc = _load(programs["resident"], EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    assert proc.returncode == 0, proc.stderr
    assert "RAISED method->execute() failed with error 0x12" in proc.stdout, proc.stdout
    assert "this argument is in CUDA memory (a device-resident program); the onnxruntime " \
        "fallback runs on the host and copies it through host memory with CUDA, but CUDA is " \
        "not usable here: no CUDA driver" in proc.stdout, proc.stdout


# ---- the onnxruntime executor's staging, with synthetic arguments ---------------

def _arg(is_input: bool, device: int, data: int | None, sizes, keep: list):
    from executorch_tensorrt.runtime.adapter import abi

    arr = (ctypes.c_int32 * 2)(2, 3)
    order = (ctypes.c_uint8 * 2)(0, 1)
    keep += [arr, order]
    a = abi.EtrtArg()
    a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), abi.ETRT_ARG_TENSOR, is_input, 6
    a.data, a.nbytes, a.ndim = data, 24, 2
    a.device_type, a.device_index = device, 0
    a.sizes = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))
    a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
    return a


def test_staging_refuses_clearly_without_cuda():
    from executorch_tensorrt.runtime.adapter import abi
    from executorch_tensorrt.runtime.arguments import ArgumentError
    from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor

    ex = OnnxRuntimeExecutor(read_blob(identity_blob()))
    keep: list = []
    host_in, host_out = torch.arange(6, dtype=torch.float32), torch.zeros(6)
    # Host arguments still run (and prove the blob itself is fine).
    ex.execute([_arg(1, abi.ETRT_DEVICE_CPU, host_in.data_ptr(), (2, 3), keep),
                _arg(0, abi.ETRT_DEVICE_CPU, host_out.data_ptr(), (2, 3), keep)])
    assert torch.equal(host_out, host_in)
    with pytest.raises(ArgumentError, match="in CUDA memory .* CUDA is not usable here: no CUDA "
                       r"driver \(libcuda.so.1 cannot be loaded"):
        ex.execute([_arg(1, abi.ETRT_DEVICE_CUDA, 0x7000_0000, (2, 3), keep),
                    _arg(0, abi.ETRT_DEVICE_CPU, host_out.data_ptr(), (2, 3), keep)])
    with pytest.raises(ArgumentError, match="device-resident output with no memory: ExecuTorch "
                       "plans none .* set_output_data_ptr"):
        ex.execute([_arg(1, abi.ETRT_DEVICE_CPU, host_in.data_ptr(), (2, 3), keep),
                    _arg(0, abi.ETRT_DEVICE_CUDA, None, (2, 3), keep)])
