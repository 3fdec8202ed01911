"""Exports cos(erfinv(tanh(x))) with TensorRT first and ExecuTorch's
CudaPartitioner as the catch-all (needs CUDA PyTorch and an NVIDIA GPU), then
prints what the saved program carries. TensorRT translates erfinv
(aot/onnx/extra_ops.py), so it is excluded from TensorRT here to give the
CUDA partitioner its part, as the program in tests/data was made before
that translation existed. Run on the H200 as docs/verification.md
describes; its output program is tests/data/erfinv_cuda_h200.pte.

    EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1 python tools/gpu/h200_cuda_export.py OUT.pte
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("EXECUTORCH_TENSORRT_SKIP_REGISTRATION", "1")


def main(out: str) -> int:
    import torch
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
    from executorch_tensorrt.examples.models import CosErfinvTanh
    from executorch_tensorrt.program.info import format_program, read_program

    print("torch", torch.__version__, "GPU:", torch.cuda.get_device_name(0))
    ep = torch.export.export(CosErfinvTanh().eval(), (torch.randn(4, 8),))
    cuda_specs = [CudaBackend.generate_method_name_compile_spec("forward"),
                  CompileSpec("target_device", b"cuda:0")]
    trt = TensorRTPartitioner(exclude_ops=["aten.erfinv.default"])
    edge = to_edge_transform_and_lower(
        ep, partitioner=[trt, CudaPartitioner(cuda_specs)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True))
    print("left by TensorRT:", trt.reports[0].rejected)
    with open(out, "wb") as f:
        f.write(edge.to_executorch().buffer)
    print(format_program(read_program(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
