"""Checks the TensorRT executor's GPU-side error path on a machine with a GPU.

Runs without ExecuTorch (a machine's PyTorch may not match the executorch
wheel): takes TensorRT blobs extracted from .pte files, asks the CUDA driver
and PyTorch about the GPU, runs the TensorRT executor's init on each blob, and
also asks TensorRT itself to deserialize the engine, printing what each says.

    EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1 python tools/gpu/gpu_probe.py blob1.bin ...
"""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("EXECUTORCH_TENSORRT_SKIP_REGISTRATION", "1")


def main(paths: list[str]) -> int:
    import torch

    from executorch_tensorrt.tensorrt.flavor import collecting_logger, load_tensorrt
    from executorch_tensorrt.blob import read_blob
    from executorch_tensorrt.runtime.cuda.probe import cuda_unavailable_reason
    from executorch_tensorrt.runtime.tensorrt.executor import EngineUnavailable, TensorRTExecutor

    report: dict = {"cuda_unavailable_reason": cuda_unavailable_reason(),
                    "torch": torch.__version__, "torch_cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        report["gpu"] = torch.cuda.get_device_name(0)
        report["capability"] = torch.cuda.get_device_capability(0)
    trt = load_tensorrt()
    report["tensorrt"] = f"{trt.flavor} {trt.version}"
    for path in paths:
        blob = read_blob(open(path, "rb").read())
        entry: dict = {"compute_capabilities": blob.metadata.get("compute_capabilities")}
        try:
            TensorRTExecutor(blob)
            entry["executor"] = "initialised"
        except EngineUnavailable as e:
            entry["executor"] = f"EngineUnavailable: {e}"
        logger = collecting_logger(trt)
        engine = trt.module.Runtime(logger).deserialize_cuda_engine(blob.engine)
        entry["tensorrt_deserialize"] = "ok" if engine is not None else logger.messages[-3:]
        report[os.path.basename(path)] = entry
    print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
