"""Per-call time on a GPU: a .pte through our delegate, the raw engine through
TensorRT's own Python API, and eager PyTorch, for models of >= 1 ms.

    # where the package exports (CPU is enough): programs, blobs, model seeds
    .venv/bin/python tools/bench/gpu.py prepare OUT_DIR
    # on the GPU machine (ExecuTorch is optional there)
    python3 tools/bench/gpu.py run OUT_DIR [--calls 100] [--json result.json]

`run` does every step it can and says why it stopped at the others:
- eager: the model on the GPU, torch.cuda.synchronize() after each call;
- raw engine: the blob's engine deserialized with TensorRT's Python API,
  shapes and addresses bound once, then per call execute_async_v3 and a
  stream synchronize (device-resident inputs and outputs), and the same with
  host inputs and outputs copied in and out (what the .pte's delegate does);
- delegate: the .pte through `executorch.runtime` with this package's
  TensorRT executor (host inputs and outputs, as a plain export has).
Overhead = delegate / raw engine (host I/O) - 1; the issue's goal is <= 2 %.

    python3 tools/bench/gpu.py overhead [--calls 2000] [--json result.json]

times the executor's own per-call path (BoundContext) around a FAKE, labelled
engine: a stand-in execution context whose enqueue launches K tiny kernels
on the given stream (K = 1 and 100), so that what is measured is ours (the
checks, the binding, the events, the graph launch), not TensorRT's. It runs
whichever BoundContext is on the path, so running it once with an older
checkout's src on PYTHONPATH compares before and after.
On the H200 TensorRT-RTX refuses the engine (compute capability 9.0) and the
executorch wheel does not load with that machine's PyTorch; the output says so
(docs/benchmarks.md). Not a test: timings on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

os.environ.setdefault("EXECUTORCH_TENSORRT_SKIP_REGISTRATION", "1")  # re-enabled for the delegate


class WideConv(nn.Module):
    """Convolutions at full resolution: few weights (small files), >= 1 ms on a large GPU."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 64, 3, padding=1), nn.ReLU()]
        for _ in range(4):
            layers += [nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).mean(dim=(2, 3))


class LongAttention(nn.Module):
    """Self-attention over a long sequence (matmul, softmax), d=256."""

    def __init__(self, d: int = 256) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attention = torch.softmax(q @ k.transpose(-1, -2) / 16.0, dim=-1)
        return self.out(attention @ v)


MODELS = {"wideconv": (WideConv, (16, 3, 224, 224)), "attention": (LongAttention, (16, 2048, 256))}


def model_and_input(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    factory, shape = MODELS[name]
    return factory().eval(), torch.randn(shape)


def prepare(folder: Path) -> None:
    import executorch_tensorrt  # noqa: F401 - registers the backend for export
    from executorch.exir._serialize._program import deserialize_pte_binary

    folder.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        model, x = model_and_input(name)
        pte = executorch_tensorrt.export(model, (x,), folder / f"{name}.pte", progress=None)
        program = deserialize_pte_binary(pte.read_bytes()).program
        blobs = [bytes(program.backend_delegate_data[d.processed.index].data)
                 for plan in program.execution_plan for d in plan.delegates
                 if d.id == "TensorRTBackend"]
        if len(blobs) != 1:
            raise SystemExit(f"{name}: expected one TensorRT partition, got {len(blobs)}")
        (folder / f"{name}.blob").write_bytes(blobs[0])
        print(f"{name}: {pte} ({pte.stat().st_size} bytes), blob {len(blobs[0])} bytes")


def per_call_ms(step, calls: int, repeat: int = 5) -> float:
    """Median over `repeat` runs of the mean wall time of `calls` calls."""
    for _ in range(3):
        step()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        runs.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(runs)


def eager(name: str, calls: int) -> float:
    model, x = model_and_input(name)
    model, x = model.cuda(), x.cuda()

    def step():
        with torch.no_grad():
            model(x)
        torch.cuda.synchronize()

    return per_call_ms(step, calls)


def raw_engine(blob_path: Path, calls: int) -> dict:
    """TensorRT's own Python API on the blob's engine; raises with TensorRT's
    words when it cannot deserialize it here."""
    from executorch_tensorrt.blob import read_blob
    from executorch_tensorrt.runtime.arguments import split_bindings
    from executorch_tensorrt.tensorrt.flavor import collecting_logger, load_tensorrt

    blob = read_blob(blob_path.read_bytes())
    trt = load_tensorrt(blob.metadata.get("trt_flavor"))
    logger = collecting_logger(trt)
    runtime = trt.module.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(blob.engine)
    if engine is None:
        raise RuntimeError(f"{trt.flavor} {trt.version} refused the engine: "
                           + " ".join(logger.messages[-3:]))
    context = engine.create_execution_context()
    inputs, outputs = split_bindings(blob.metadata)
    device, host = {}, {}
    for b in inputs + outputs:
        dtype = getattr(torch, b.dtype.name)  # bindings carry numpy dtypes
        device[b.name] = torch.randn(b.shape, device="cuda").to(dtype)
        host[b.name] = torch.empty(b.shape, dtype=dtype).pin_memory()
        if b.is_input:
            context.set_input_shape(b.name, b.shape)
        context.set_tensor_address(b.name, device[b.name].data_ptr())
    stream = torch.cuda.Stream()

    def resident():
        context.execute_async_v3(stream.cuda_stream)
        stream.synchronize()

    def host_io():
        with torch.cuda.stream(stream):
            for b in inputs:
                device[b.name].copy_(host[b.name], non_blocking=True)
            context.execute_async_v3(stream.cuda_stream)
            for b in outputs:
                host[b.name].copy_(device[b.name], non_blocking=True)
        stream.synchronize()

    return {"device I/O": per_call_ms(resident, calls), "host I/O": per_call_ms(host_io, calls)}


def delegate(pte: Path, name: str, calls: int) -> float:
    os.environ.pop("EXECUTORCH_TENSORRT_SKIP_REGISTRATION", None)
    import executorch_tensorrt
    from executorch.runtime import Runtime

    executorch_tensorrt.register()
    method = Runtime.get().load_program(str(pte)).load_method("forward")
    _, x = model_and_input(name)
    return per_call_ms(lambda: method.execute([x]), calls)


def run(folder: Path, calls: int) -> dict:
    report: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible to PyTorch; run this on the GPU machine")
    report["gpu"] = torch.cuda.get_device_name(0)
    report["capability"] = "SM{}{}".format(*torch.cuda.get_device_capability(0))
    for name in MODELS:
        entry: dict = {"eager ms": round(eager(name, calls), 4)}
        for what, step in (("raw engine ms", lambda: raw_engine(folder / f"{name}.blob", calls)),
                           ("delegate ms", lambda: delegate(folder / f"{name}.pte", name, calls))):
            try:
                entry[what] = step()
            except Exception as e:  # noqa: BLE001 - report how far it got and why
                entry[what] = f"not run: {type(e).__name__}: {e}"[:600]
        raw, ours = entry["raw engine ms"], entry["delegate ms"]
        if isinstance(raw, dict) and isinstance(ours, float):
            entry["delegate overhead vs raw (host I/O)"] = f"{(ours / raw['host I/O'] - 1):+.1%}"
        report[name] = entry
        print(name, json.dumps(entry, indent=1), flush=True)
    return report


class KernelsContext:
    """FAKE IExecutionContext (labelled): each enqueue adds 1 to `out` K times
    with tiny kernels on the stream it is given; binds like TensorRT's."""

    def __init__(self, kernels: int) -> None:
        self.kernels, self.addresses, self.shapes = kernels, {}, {}
        self._out = None

    def set_input_shape(self, name, shape) -> bool:
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        return self.shapes["x"]

    def set_tensor_address(self, name, address) -> bool:
        self.addresses[name] = address
        if name == "out":
            self._out = None
        return True

    def execute_async_v3(self, stream: int) -> bool:
        if self._out is None:  # a view over the bound output, made outside captures
            address = self.addresses["out"]

            class Raw:
                __cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "version": 2,
                                            "data": (address, False), "strides": None}
            self._out = torch.as_tensor(Raw(), device="cuda")
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            for _ in range(self.kernels):
                self._out.add_(1.0)
        return True


def _arg(tensor: torch.Tensor, is_input: bool, keep: list):
    import ctypes

    from executorch_tensorrt.runtime.adapter import abi

    sizes = (ctypes.c_int32 * tensor.dim())(*tensor.shape)
    order = (ctypes.c_uint8 * tensor.dim())(*range(tensor.dim()))
    keep += [tensor, sizes, order]
    a = abi.EtrtArg()
    a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), abi.ETRT_ARG_TENSOR, is_input, 6
    a.data, a.nbytes, a.ndim = tensor.data_ptr(), tensor.nbytes, tensor.dim()
    a.device_type = abi.ETRT_DEVICE_CUDA if tensor.is_cuda else abi.ETRT_DEVICE_CPU
    a.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
    a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
    return a


def overhead(calls: int) -> dict:
    import inspect

    from executorch_tensorrt.runtime.adapter import abi
    from executorch_tensorrt.runtime.arguments import split_bindings
    from executorch_tensorrt.runtime.tensorrt.executor import BoundContext

    meta = {"io_bindings": [{"name": n, "dtype": "float32", "shape": [2, 3], "is_input": n != "out"}
                            for n in ("x", "y", "out")]}
    inputs, outputs = split_bindings(meta)
    has_graphs = "graphs" in inspect.signature(BoundContext).parameters
    report: dict = {"BoundContext": inspect.getsourcefile(BoundContext)}
    for kernels in (1, 100):
        for where in ("cuda", "cpu"):
            for graphs in ((False, True) if has_graphs else (None,)):
                options = {} if graphs is None else {"graphs": graphs}
                bound = BoundContext(KernelsContext(kernels), inputs, outputs,
                                     0, **options)  # CUDA device 0 (old and new BoundContext)
                keep: list = []
                tensors = [torch.zeros(2, 3, device=where) for _ in range(3)]
                args = (abi.EtrtArg * 3)(*(_arg(t, k < 2, keep) for k, t in enumerate(tensors)))

                def one_call():
                    bound.execute(args)

                def synced_call():
                    bound.execute(args)
                    torch.cuda.synchronize()

                name = (f"{kernels} kernel(s), {'device' if where == 'cuda' else 'host'} I/O"
                        + ("" if graphs is None else f", graphs {'on' if graphs else 'off'}"))
                per_call = per_call_ms(one_call, calls)
                torch.cuda.synchronize()
                report[name] = {"us per call (back to back)": round(per_call * 1e3, 2),
                                "us per call (synchronized)":
                                    round(per_call_ms(synced_call, calls // 4) * 1e3, 2)}
                print(name, report[name], flush=True)
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("folder", type=Path)
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("--calls", type=int, default=100)
    r.add_argument("--json", type=Path)
    o = sub.add_parser("overhead")
    o.add_argument("--calls", type=int, default=2000)
    o.add_argument("--json", type=Path)
    q = sub.add_parser("plan")
    q.add_argument("adapter_dir", type=Path, help="holds executorch/lib/libexecutorch.so and "
                   "executorch_tensorrt/lib/libexecutorch_backend_tensorrt.so")
    q.add_argument("raw_lib", type=Path, help="raw_graph_launch.c built as a shared library")
    q.add_argument("--calls", type=int, default=20000)
    q.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.folder)
        return 0
    if args.command == "plan":
        from gpu_plan import plan_overhead  # beside this file
        report = plan_overhead(args.calls, args.adapter_dir, args.raw_lib)
    elif args.command == "overhead":
        report = overhead(args.calls)
    else:
        report = run(args.folder, args.calls)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
