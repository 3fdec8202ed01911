"""Helpers shared by the test suites: one definition each of the child
environment, the fallback setting, a program's TensorRT
blobs and a small hand-made blob."""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
from pathlib import Path

import numpy as np

from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.executor import FALLBACK_ENV, FALLBACK_ONNXRUNTIME

# What a test sets to let TensorRT partitions run on onnxruntime (no GPU here).
FALLBACK = {FALLBACK_ENV: FALLBACK_ONNXRUNTIME}


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: this one's without the package's
    own variables (a test chooses those) or search paths, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EXECUTORCH_TENSORRT_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


def cli_main(*args) -> tuple[int, str, str]:
    """The command line run by its main() in this process: (exit code, stdout,
    stderr). For commands that import torch and export: a child would pay
    torch's import and a cold first export each time (minutes on a loaded CI
    machine); tests/cli/test_cli.py's child-process tests keep `python -m`
    itself covered."""
    from executorch_tensorrt.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    return code, out.getvalue(), err.getvalue()


def artifact_bytes(result) -> int:
    """What an export wrote for its program (ExportResult): the .pte and its .ptd files."""
    return result.path.stat().st_size + sum(p.stat().st_size for p in result.data_paths)


def run_forward(result, *inputs):
    """Output 0 of `forward` of an export's program (ExportResult) with its .ptd,
    through executorch.runtime."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(result.path, data_path=result.data_paths[0])
    return program.load_method("forward").execute(list(inputs))[0]


def tensorrt_blobs(pte: Path | bytes) -> list[bytes]:
    """The TensorRT blobs of a program, in delegate order over its methods."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = pte if isinstance(pte, bytes) else Path(pte).read_bytes()
    program = deserialize_pte_binary(data).program
    return [bytes(program.backend_delegate_data[d.processed.index].data)
            for plan in program.execution_plan for d in plan.delegates
            if d.id == "TensorRTBackend"]


def identity_blob() -> bytes:
    """A TR01 blob (placeholder engine) whose embedded ONNX is y = x, float32 [2, 3]."""
    from onnx import TensorProto, helper

    from executorch_tensorrt.blob import write_blob

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])],
                                                "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    meta = {"io_bindings": [{"name": "x", "dtype": "float32", "shape": [2, 3], "is_input": True},
                            {"name": "y", "dtype": "float32", "shape": [2, 3], "is_input": False}]}
    return write_blob(b"\0" * 64, meta, onnx=model.SerializeToString())


FLOAT32 = 6  # ExecuTorch ScalarType code


class Args:
    """etrt_arg structs over real buffers, kept alive with them."""

    def __init__(self) -> None:
        self.keep: list = []

    def tensor(self, buffer: np.ndarray, *, is_input: bool, dtype: int = FLOAT32,
               shape=(2, 3), nbytes: int | None = None, kind: int = abi.ETRT_ARG_TENSOR,
               dim_order=None, data: int | None = -1) -> abi.EtrtArg:
        sizes = (ctypes.c_int32 * max(len(shape), 1))(*shape)
        order = (ctypes.c_uint8 * max(len(shape), 1))(*(dim_order or range(len(shape))))
        self.keep += [buffer, sizes, order]
        a = abi.EtrtArg()
        a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), kind, is_input, dtype
        a.data = buffer.ctypes.data if data == -1 else data
        a.nbytes = buffer.nbytes if nbytes is None else nbytes
        a.ndim, a.device_type, a.device_index = len(shape), abi.ETRT_DEVICE_CPU, 0
        a.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
        a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
        return a

    def array(self, *args: abi.EtrtArg):
        """A C array of args, as the adapter passes them (a pointer)."""
        array = (abi.EtrtArg * len(args))(*args)
        self.keep.append(array)
        return array


def lower_to_buffer(ep) -> bytes:
    """An ExportedProgram lowered with TensorRTPartitioner alone: the .pte bytes."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner

    edge = to_edge_transform_and_lower(
        ep, partitioner=[TensorRTPartitioner(progress=None)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch().buffer


def new_state(before: list, method: str | None = "forward"):
    """The one executor state alive now that was not in `before` (a list of
    `live_states()` taken earlier). Other tests' states may outlive them on the
    same worker, so a test finds its own by identity, never by its contents;
    `before` holds references, so no id is reused meanwhile."""
    from executorch_tensorrt.runtime.state import live_states

    [state] = [s for s in live_states(method) if not any(s is b for b in before)]
    return state
