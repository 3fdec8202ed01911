"""`executorch-tensorrt demo`: export a built-in model, inspect it, run it
through executorch.runtime on its stored example inputs, compare every
element with eager PyTorch, and time both. Composes tools/ functions."""
from __future__ import annotations

import os
from pathlib import Path

from ..program import tensor_file as tf
from ..program.compare import compare_tensors
from ..program.references import reference_tensors
from .runner import (choose_inputs, execute, format_outputs, load_method, method_input_specs,
                     reference_path, resolve_data_path, time_calls)


def run_demo(example_name: str, out_dir: Path, atol: float, rtol: float) -> bool:
    import torch

    from ..aot.export import export_program
    from ..runtime.executor import FALLBACK_ENV, FALLBACK_ONNXRUNTIME
    from ..examples.models import example
    from ..program.info import format_program, read_program

    out_dir.mkdir(parents=True, exist_ok=True)
    model, inputs = example(example_name)
    path = out_dir / f"{example_name}.pte"
    print(f"== export: built-in model {example_name!r} -> {path}")
    result = export_program(model, inputs, path)
    if result.expected_path:
        print(f"reference (example inputs and eager outputs): {result.expected_path}, "
              f"{reference_path(path)}")
    print(f"\n== inspect {path}")
    print(format_program(read_program(path)))
    fallback = os.environ.get(FALLBACK_ENV)
    if fallback is None:
        os.environ[FALLBACK_ENV] = fallback = FALLBACK_ONNXRUNTIME
        print(f"\n== run (the demo sets {FALLBACK_ENV}={FALLBACK_ONNXRUNTIME}: where no GPU can "
              "run the engine, the embedded ONNX runs on the CPU with onnxruntime)")
    else:
        print(f"\n== run ({FALLBACK_ENV}={fallback})")
    data, note = resolve_data_path(path, None)  # model.ptd when export wrote one
    if note:
        print(note)
    method = load_method(path, data_path=data)
    feed, where = choose_inputs(method_input_specs(method), None, None, reference_path(path))
    print(f"inputs: {where}")
    outputs = execute(method, feed)
    print(format_outputs(outputs))

    print("\n== compare every element with eager PyTorch (the reference written at export)")
    _, expected = reference_tensors(path)
    results = compare_tensors(expected, outputs, atol, rtol)
    for r in results:
        print(r.describe(atol, rtol))

    torch_inputs = [tf.to_torch(t) for t in feed]
    run = time_calls(lambda: method.execute(torch_inputs))
    with torch.no_grad():
        eager = time_calls(lambda: model(*inputs))
    # No machine this was built on runs TensorRT engines: say what was timed.
    if _fallback_used(fallback):
        print("\n== timings: the CPU FALLBACK (TensorRT partitions on onnxruntime, no TensorRT "
              "engine ran) against eager PyTorch on the CPU; says nothing about TensorRT speed")
    else:
        print("\n== timings: TensorRT engines against eager PyTorch")
    print(f"export {result.seconds['total']:.2f} s")
    print(f"ExecuTorch run{' (CPU fallback)' if _fallback_used(fallback) else ''}: {run}")
    print(f"eager PyTorch (CPU): {eager}")
    ok = all(r.ok for r in results)
    print("PASS" if ok else f"FAIL: outputs differ beyond atol {atol:g} + rtol {rtol:g} x |expected|")
    return ok


def _fallback_used(fallback: str | None) -> bool:
    """Whether a TensorRT partition of the loaded program runs on onnxruntime
    (asks the installed executors which kinds they made)."""
    from ..runtime import callbacks

    executors = callbacks._executors  # noqa: SLF001 - the package's own record
    kinds = {e.kind for e in executors.handles.values()} if executors else set()
    return bool(fallback) and "onnxruntime" in kinds
