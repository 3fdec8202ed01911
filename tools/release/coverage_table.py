"""Measures the model zoo (tests/aot/zoo.py) and writes docs/evidence/coverage.md.

    .venv/bin/python tools/release/coverage_table.py [--out docs/coverage.md] [--only NAME ...]

For every zoo model: export it with executorch_tensorrt.export_program (real
TensorRT-RTX engines), then record the share of compute ops TensorRT took, the
number of TensorRT partitions, the ops left outside them (read back from the .pte),
the export time, the per-op reasons of the partition report, run times against
the same model lowered to XNNPACK alone (and, for --xnnpack-after models,
with XNNPACK after TensorRT), and the largest absolute difference from eager PyTorch of
(a) the delegate's embedded ONNX in onnxruntime (single-partition models only) and
(b) the whole .pte through executorch.runtime with the onnxruntime fallback.
Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
import traceback
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "aot"))
os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def trt_blobs(path: Path) -> list:
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch_tensorrt.blob import read_blob

    program = deserialize_pte_binary(path.read_bytes()).program
    blobs = []
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.id == "TensorRTBackend":
                blobs.append(read_blob(bytes(program.backend_delegate_data[d.processed.index].data)))
    return blobs


def onnx_vs_eager(blob, inputs, want) -> float:
    import numpy as np
    import onnxruntime as ort
    import torch
    import zoo

    session = ort.InferenceSession(blob.onnx, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(inputs):
        raise ValueError(f"ONNX has {len(names)} inputs, the model {len(inputs)}")
    got = [torch.from_numpy(g) for g in
           session.run(None, {n: np.ascontiguousarray(t.numpy()) for n, t in zip(names, inputs)})]
    if len(got) != len(want):
        raise ValueError(f"ONNX has {len(got)} outputs, the model {len(want)}")
    # The delegate orders its outputs its own way (the program maps them back):
    # pair each eager output with the first unused ONNX output of its shape and dtype.
    unused, paired = list(range(len(got))), []
    for w in want:
        i = next((i for i in unused if got[i].shape == w.shape and got[i].dtype == w.dtype), None)
        if i is None:
            raise ValueError(f"no ONNX output of shape {tuple(w.shape)} and dtype {w.dtype}")
        unused.remove(i)
        paired.append(got[i])
    return zoo.max_abs_diff(paired, want)


def run_ms(path: Path, inputs, repeat: int = 20) -> float:
    """Median wall time of one execute, in ms, after two warm-up calls."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(path)).load_method("forward")
    args = list(inputs)
    for _ in range(2):
        method.execute(args)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        method.execute(args)
        times.append(time.perf_counter() - t)
    return 1000 * sorted(times)[len(times) // 2]


def xnnpack_alone(model, inputs, path: Path) -> float:
    """Exports with ExecuTorch's XNNPACK partitioner alone; returns the seconds."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    t0 = time.perf_counter()
    ep = torch.export.export(model, tuple(inputs))
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    path.write_bytes(program.buffer)
    return time.perf_counter() - t0


def measure(entry, out_dir: Path, xnnpack_after: bool = False) -> dict:
    import executorch_tensorrt
    from executorch.runtime import Runtime
    from executorch_tensorrt.program.info import read_program
    import zoo

    row: dict = {"name": entry.name, "atol": entry.atol, "floor": entry.coverage_floor}
    model, inputs = entry.build()
    want = zoo.eager(model, inputs)
    t0 = time.perf_counter()
    try:
        result = executorch_tensorrt.export_program(model, inputs, out_dir / f"{entry.name}.pte",
                                                    progress=None)
    except Exception as e:  # noqa: BLE001 - recorded in the table
        row["error"] = f"export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return row
    row["export_s"] = time.perf_counter() - t0
    report = result.partitioner.report
    row["share"], row["taken"], row["total"] = zoo.coverage(report)
    (method,) = read_program(result.path)
    row["partitions"] = sum(d.backend == "TensorRTBackend" for d in method.delegates)
    row["other_delegates"] = sorted({d.backend for d in method.delegates} - {"TensorRTBackend"})
    row["outside"] = sorted({op.removesuffix("_out").removesuffix(".out").replace("::", ".")
                             for op in method.operators})
    row["rejected"] = sorted({op["op"] + ": " + " ".join(r["reason"].split())[:160]
                              for op in report.as_dict()["ops"] for r in op["reasons"]})
    row["run_ms"] = run_ms(result.path, inputs)
    try:
        row["xnn_export_s"] = xnnpack_alone(model, inputs, out_dir / f"{entry.name}.xnn.pte")
        row["xnn_run_ms"] = run_ms(out_dir / f"{entry.name}.xnn.pte", inputs)
    except Exception as e:  # noqa: BLE001 - recorded in the table
        row["xnn_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    if xnnpack_after:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        both = executorch_tensorrt.export_program(
            model, inputs, out_dir / f"{entry.name}.both.pte", progress=None,
            partitioners=[XnnpackPartitioner()])
        row["both_run_ms"] = run_ms(both.path, inputs)
    blobs = trt_blobs(result.path)
    if len(blobs) == 1 and not method.operators and not row["other_delegates"]:
        try:
            row["onnx_diff"] = onnx_vs_eager(blobs[0], inputs, want)
        except Exception as e:  # noqa: BLE001
            row["onnx_diff"] = f"error: {e}"
    else:
        row["onnx_diff"] = "n/a (split)" if blobs else "n/a (no delegate)"
    try:
        got = Runtime.get().load_program(str(result.path)).load_method("forward").execute(
            list(inputs))
        row["pte_diff"] = zoo.max_abs_diff(got, want)
    except Exception as e:  # noqa: BLE001
        row["pte_diff"] = f"error: {type(e).__name__}: {e}"
    return row


def _fmt_diff(v) -> str:
    return f"{v:.1e}" if isinstance(v, float) else str(v)


def render(rows: list[dict], versions: dict[str, str], seconds: float) -> str:
    lines = [
        "# Model zoo coverage",
        "",
        "Generated by `.venv/bin/python tools/release/coverage_table.py` from the models in "
        "`tests/aot/zoo.py`; `tests/aot/test_zoo.py` asserts the coverage floors and tolerances.",
        "",
        "| model | TensorRT ops / compute ops | TRT partitions | ops outside TensorRT | "
        "export s (XNNPACK alone) | run ms (XNNPACK alone) | "
        "max abs diff, ONNX (onnxruntime) | max abs diff, .pte | atol | floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['error']} | | | | | | | {r['atol']:g} | "
                         f"{r['floor']:g} |")
            continue
        outside = ", ".join(f"`{o}`" for o in r["outside"]) or "none"
        if r["other_delegates"]:
            outside += " (+ delegates: " + ", ".join(r["other_delegates"]) + ")"
        xnn_s = f"{r['xnn_export_s']:.1f}" if "xnn_export_s" in r else r.get("xnn_error", "")
        xnn_ms = f"{r['xnn_run_ms']:.2f}" if "xnn_run_ms" in r else "failed"
        run = f"{r['run_ms']:.2f} ({xnn_ms})"
        if "both_run_ms" in r:
            run += f"; with XNNPACK after TensorRT {r['both_run_ms']:.2f}"
        lines.append(
            f"| {r['name']} | {r['taken']}/{r['total']} ({100 * r['share']:.1f}%) | "
            f"{r['partitions']} | {outside} | {r['export_s']:.1f} ({xnn_s}) | {run} | "
            f"{_fmt_diff(r['onnx_diff'])} | {_fmt_diff(r['pte_diff'])} | {r['atol']:g} | "
            f"{r['floor']:g} |")
    rejected = {(r["name"], x) for r in rows for x in r.get("rejected", [])}
    lines += ["", "## Why ops stayed outside TensorRT", ""]
    if rejected:
        by_reason: dict[str, list[str]] = {}
        for name, x in sorted(rejected):
            by_reason.setdefault(x, []).append(name)
        lines += [f"- {x} ({', '.join(names)})" for x, names in by_reason.items()]
    else:
        lines.append("Nothing was rejected.")
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines += [
        "",
        "## Method",
        "",
        "- Each model is built with its seed (`ZooEntry.build`), exported with "
        "`executorch_tensorrt.export_program(model, inputs, path)` (default options: "
        "TensorRT-RTX builds one engine for every compute capability it supports), and "
        "written to a `.pte`.",
        "- *Compute ops*: the edge-dialect `call_function` nodes other than `getitem` that the "
        "TensorRT partitioner saw (`PartitionReport.ops_of`); *TensorRT ops*: those inside a "
        "TensorRT partition (`PartitionReport.partitions`).",
        "- *TRT partitions* and *ops outside TensorRT* are read back from the saved `.pte` "
        "(`executorch_tensorrt.program.info.read_program`): the `TensorRTBackend` delegates "
        "and the operator table of ops that run on ExecuTorch's portable kernels.",
        "- *Export s*: wall time of `export_program` (torch.export, partitioning with "
        "TensorRT's parser, engine builds on the CPU, serialization), on a shared machine.",
        "- *ONNX*: the ONNX model embedded in the TensorRT blob, run in onnxruntime on the "
        "same inputs and compared with eager (the delegate orders its outputs its own way; "
        "each eager output is paired with the first unused ONNX output of the same shape and "
        "dtype). Only for models taken whole by one partition (`n/a (split)` otherwise; the "
        "whole program is still compared).",
        "- *.pte*: the program run through `executorch.runtime` with "
        "`EXECUTORCH_TENSORRT_FALLBACK=onnxruntime` (no machine here can run the engines), "
        "compared with eager over all outputs (integer outputs: argmax/topk indices).",
        "- *Run ms*: median wall time of `Method.execute` through `executorch.runtime` "
        "(20 calls after 2 warm-up calls). TensorRT partitions run in onnxruntime on the CPU "
        "here (no GPU runs the engines), so this compares the CPU fallback, not TensorRT, "
        "with the same model lowered by `XnnpackPartitioner` alone (in parentheses). For "
        "models listed in `--xnnpack-after`, also the program exported with "
        "`partitioners=[XnnpackPartitioner()]` after TensorRT.",
        "- *Rejected*: each op's reasons from the partition report "
        "(`ExportResult.report`, also written as `<model>.report.json`).",
        "- Models named `hf_*` are transformers classes built from tiny configs with random "
        "weights (no download, no wrapper); their outputs are the ModelOutput's tensor leaves "
        "in `torch.utils._pytree` order.",
        "- fp32 throughout; tolerances are absolute.",
        "",
        "## Versions",
        "",
        f"Measured {now} on {platform.machine()} ({os.cpu_count()} CPUs), Python "
        f"{platform.python_version()}, whole zoo in {seconds:.0f} s.",
        "",
    ]
    lines += [f"- {k} {v}" for k, v in versions.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "coverage.md")
    ap.add_argument("--only", nargs="*", help="measure only these models (for debugging)")
    ap.add_argument("--xnnpack-after", nargs="*", default=["hf_swin", "mlp"],
                    help="models also exported with XNNPACK after TensorRT")
    args = ap.parse_args(argv)

    import executorch_tensorrt  # noqa: F401 - registers TensorRTBackend
    import zoo

    entries = [e for e in zoo.ZOO if not args.only or e.name in args.only]
    versions = {d: _version(d) for d in ("torch", "executorch", "tensorrt-rtx-cu13",
                                         "onnxruntime", "onnx", "onnxscript", "transformers")}
    versions["executorch-tensorrt"] = _version("executorch-tensorrt")
    rows, failed = [], False
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, entry in enumerate(entries, 1):
            log(f"[{i}/{len(entries)}] {entry.name}: exporting...")
            try:
                row = measure(entry, Path(tmp), entry.name in args.xnnpack_after)
            except Exception:  # noqa: BLE001
                row = {"name": entry.name, "atol": entry.atol, "floor": entry.coverage_floor,
                       "error": "measurement failed: " + traceback.format_exc(limit=1).splitlines()[-1]}
            rows.append(row)
            if "error" in row:
                failed = True
                log(f"[{i}/{len(entries)}] {entry.name}: {row['error']}")
                continue
            ok = isinstance(row["pte_diff"], float) and row["pte_diff"] <= entry.atol
            failed |= not ok or row["share"] < entry.coverage_floor
            log(f"[{i}/{len(entries)}] {entry.name}: {row['taken']}/{row['total']} ops on TensorRT "
                f"in {row['partitions']} partition(s), export {row['export_s']:.1f} s, "
                f"onnx {_fmt_diff(row['onnx_diff'])}, pte {_fmt_diff(row['pte_diff'])}")
    seconds = time.perf_counter() - t0
    if args.only:
        log("--only given: not writing the table")
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(render(rows, versions, seconds))
        log(f"wrote {args.out} ({seconds:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
