"""TensorRT with ExecuTorch's CudaPartitioner as the catch-all for erfinv
(kept off TensorRT, which translates it since aot/onnx/extra_ops.py).

The export needs CUDA PyTorch and an NVIDIA GPU; it ran on an H200
(docs/verification.md, tools/gpu/h200_cuda_export.py) and its program is kept in
tests/data. Reading that program runs everywhere; re-exporting runs where a GPU is.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from executorch_tensorrt.program.info import read_program

H200_PROGRAM = Path(__file__).resolve().parents[1] / "data" / "erfinv_cuda_h200.pte"


def check_tensorrt_and_cuda(path) -> None:
    (method,) = read_program(path)
    backends = [d.backend for d in method.delegates]
    assert backends.count("TensorRTBackend") == 2, backends  # tanh, cos
    assert backends.count("CudaBackend") == 1, backends     # erfinv
    assert not any("erfinv" in op for op in method.operators), method.operators
    trt_ops = {b["name"] for d in method.delegates if d.backend == "TensorRTBackend"
               for b in d.metadata["io_bindings"] if not b["is_input"]}
    assert trt_ops == {"tanh", "cos"}, trt_ops


def test_program_exported_on_the_h200_carries_tensorrt_and_cuda_delegates():
    check_tensorrt_and_cuda(H200_PROGRAM)


def test_export_with_cuda_partitioner_on_a_gpu(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA PyTorch and an NVIDIA GPU at export (CudaPartitioner compiles "
                    "with AOTInductor); the H200 result is checked above")
    import subprocess
    import sys

    out = tmp_path / "erfinv_cuda.pte"
    tool = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "h200_cuda_export.py"
    subprocess.run([sys.executable, str(tool), str(out)], check=True)
    check_tensorrt_and_cuda(out)


def test_a_program_for_another_runtime_is_flagged():
    """CudaBackend is not in the PyPI runtime: export warns, naming it, instead of
    failing on the et_copy kernels that ExecuTorch's CUDA runtime provides."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    from executorch_tensorrt.aot.checks.runtime_kernels import (
        RuntimeMismatchWarning, check_runtime_kernels)
    from executorch_tensorrt.program.info import describe_program

    program = deserialize_pte_binary(H200_PROGRAM.read_bytes()).program
    with pytest.warns(RuntimeMismatchWarning, match="CudaBackend.*cannot run here"):
        check_runtime_kernels(describe_program(program))
