"""Per-call time on a GPU: a .pte through our delegate, the raw engine through
TensorRT's own Python API, and eager PyTorch, for models of >= 1 ms.

    # where the package exports (CPU is enough): programs, blobs, model seeds
    .venv/bin/python tools/bench_gpu.py prepare OUT_DIR
    # on the GPU machine (ExecuTorch is optional there)
    python3 tools/bench_gpu.py run OUT_DIR [--calls 100] [--json result.json]

`run` does every step it can and says why it stopped at the others:
- eager: the model on the GPU, torch.cuda.synchronize() after each call;
- raw engine: the blob's engine deserialized with TensorRT's Python API,
  shapes and addresses bound once, then per call execute_async_v3 and a
  stream synchronize (device-resident inputs and outputs), and the same with
  host inputs and outputs copied in and out (what the .pte's delegate does);
- delegate: the .pte through `executorch.runtime` with this package's
  TensorRT executor (host inputs and outputs, as a plain export has).
Overhead = delegate / raw engine (host I/O) - 1; the issue's goal is <= 2 %.
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
        device[b.name] = torch.randn(b.shape, device="cuda").to(b.dtype)
        host[b.name] = torch.empty(b.shape, dtype=b.dtype).pin_memory()
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("folder", type=Path)
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("--calls", type=int, default=100)
    r.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.folder)
        return 0
    report = run(args.folder, args.calls)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
