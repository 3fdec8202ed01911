"""Runs a partition's embedded ONNX model with onnxruntime on the CPU.

Used only when the caller allows the fallback (EXECUTORCH_TENSORRT_FALLBACK=
onnxruntime or the load-time backend option "fallback"). Reduced-precision
partitions run in fp32 here (onnx_upcast.py).
"""
from __future__ import annotations

import numpy as np
import onnxruntime
import torch

from ..blob import Blob
from . import abi
from .onnx_upcast import upcast_to_fp32
from .arguments import ArgumentError, HostViews, check_input, resize_output, split_bindings


class OnnxRuntimeExecutor:
    kind = "onnxruntime"

    def __init__(self, blob: Blob):
        if blob.onnx is None:
            raise ArgumentError("this blob carries no ONNX model, so onnxruntime cannot run it "
                                "(it was written by a tool that embeds only the engine)")
        self.inputs, self.outputs = split_bindings(blob.metadata)
        model = blob.onnx
        if blob.metadata.get("precision", "fp32") != "fp32":
            model = upcast_to_fp32(model)  # see onnx_upcast.py: the CPU lacks fp16 kernels
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        if len(self.input_names) != len(self.inputs) or len(self.output_names) != len(self.outputs):
            raise ArgumentError(
                f"the embedded ONNX model has {len(self.input_names)} inputs and "
                f"{len(self.output_names)} outputs; the blob's io_bindings list "
                f"{len(self.inputs)} and {len(self.outputs)}")
        self.views = HostViews()

    def _host(self, arg: abi.EtrtArg, shape) -> torch.Tensor:
        if arg.device_type == abi.ETRT_DEVICE_CPU:
            return self.views.view(arg, shape)
        raise ArgumentError("the onnxruntime fallback needs host memory, and this argument is "
                            "device-resident; run it on a GPU with TensorRT")

    def execute(self, args) -> None:
        feeds = {}
        for i, binding in enumerate(self.inputs):
            shape = check_input(args[i], binding, i)
            feeds[self.input_names[i]] = self._host(args[i], shape).numpy()
        results = self.session.run(self.output_names, feeds)
        for j, result in enumerate(results):
            arg = args[len(self.inputs) + j]
            result = np.asarray(result)
            resize_output(arg, tuple(result.shape), self.outputs[j])
            out = self._host(arg, tuple(result.shape)).numpy()
            np.copyto(out, result, casting="same_kind")
