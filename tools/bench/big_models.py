"""Export of big models: peak memory, artifact size, time, and a fallback run.

    .venv/bin/python tools/bench/big_models.py [--models mlp100m,linear1g]
        [--out docs/big-models.md] [--no-xnnpack]

Each export runs in a child process, which builds the model, imports the
exporters, records its RSS (the baseline), exports, and reports its peak RSS (VmHWM) minus the baseline:
the memory the export itself needed. Ratios are to the model's weight bytes.
In the same run, XNNPACK lowers the same model (child process too) for the
time and memory comparison. The fallback run loads the .pte (+ .ptd) through
executorch.runtime with the onnxruntime fallback and compares with eager.

Models: mlp100m = 6 x Linear(2048, 2048) (100.7 MB); linear1g =
Linear(16384, 16000) (1.05 GB); linear2g5 = 5 layers alternating Linear(16384, 8192) and
Linear(8192, 16384) (2.7 GB,
past protobuf's 2 GB); linear6g = 12 such layers (6.4 GB). The
GB-scale ones: one at a time (`--models linear2g5`). Not a unit test.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = {
    # name: (layers as (in, out) pairs, batch)
    "mlp67m": ([(2048, 2048)] * 4, 4),  # tests/aot/test_big_model_ratios.py
    "mlp100m": ([(2048, 2048)] * 6, 4),
    "linear1g": ([(16384, 16000)], 4),
    "linear2g5": ([(16384, 8192), (8192, 16384)] * 2 + [(16384, 8192)], 4),
    "linear6g": ([(16384, 8192), (8192, 16384)] * 6, 4),
}


def build_model(name: str):
    import torch

    layers, batch = MODELS[name]
    torch.manual_seed(0)
    mods = []
    for i, (fan_in, fan_out) in enumerate(layers):
        lin = torch.nn.Linear(fan_in, fan_out)
        mods.append(lin)
        if i + 1 < len(layers):
            mods.append(torch.nn.ReLU())
            if fan_out != layers[i + 1][0]:
                raise ValueError("layer sizes do not chain")
    model = torch.nn.Sequential(*mods).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, (torch.randn(batch, layers[0][0]),)


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(name: str, mode: str, folder: str, run_check: str = "on") -> dict:
    """Runs in the child: export `name` with `mode`, report memory and time
    (`run_check` "off": export without running the program once)."""
    import torch

    model, inputs = build_model(name)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    # The baseline is a process ready to export: the model built and both
    # exporters' libraries loaded (TensorRT's included), the same for each variant.
    import executorch.backends.xnnpack.partition.xnnpack_partitioner  # noqa: F401
    import executorch.exir  # noqa: F401
    import executorch_tensorrt.aot.export  # noqa: F401
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    load_tensorrt()
    baseline_kb = _status_kb("VmRSS")
    start = time.perf_counter()
    pte = Path(folder) / f"{name}_{mode}.pte"
    if mode == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        ep = torch.export.export(model, inputs)
        program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        with open(pte, "wb") as f:
            program.write_to_file(f)
        files = [pte]
    else:
        from executorch_tensorrt.aot.export import export_program

        result = export_program(model, inputs, pte, progress=None, write_expected_file=False,
                                external_weights=mode == "trt_ptd",
                                inline_weights=mode == "trt_inline",
                                run_check=run_check != "off")
        files = [pte, *result.data_paths]
    seconds = time.perf_counter() - start
    peak_kb = _status_kb("VmHWM")
    # The eager reference, for the fallback run (which then needs no model).
    with torch.no_grad():
        torch.save({"inputs": inputs, "out": model(*inputs)}, Path(folder) / f"{name}.ref")
    return {"model": name, "mode": mode, "run_check": run_check, "weights": weights,
            "seconds": seconds,
            "peak_above_baseline": (peak_kb - baseline_kb) * 1024,
            "baseline": baseline_kb * 1024,
            "artifact": sum(p.stat().st_size for p in files),
            "files": [str(p) for p in files]}


def run_child(name: str, mode: str, folder: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", name, mode, folder],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"model": name, "mode": mode,
                "error": (out.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def fallback_check(name: str, files: list[str]) -> str:
    """Runs the exported program with the onnxruntime fallback (child process,
    so a crash cannot take the benchmark down); max relative error vs the
    eager output the export child saved. Also reports the run's peak RSS."""
    ref = Path(files[0]).parent / f"{name}.ref"
    code = f"""
import os, sys, json, torch, executorch_tensorrt
os.environ["EXECUTORCH_TENSORRT_FALLBACK"] = "onnxruntime"
from executorch.runtime import Runtime
ref = torch.load({str(ref)!r})
files = {files!r}
kw = {{"data_path": files[1]}} if len(files) > 1 else {{}}
(got,) = Runtime.get().load_program(files[0], **kw).load_method("forward").execute(list(ref["inputs"]))
want = ref["out"]
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps([float(((got - want).abs().max() / want.abs().max()).item()), int(hwm) * 1024]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        return "failed: " + ((out.stderr.strip().splitlines() or ["?"])[-1][:200])
    err, peak = json.loads(out.stdout.strip().splitlines()[-1])
    return f"{err:.1e} ({'ok' if err <= 1e-4 else 'FAIL'}; run peak RSS {peak / 1e9:.1f} GB)"


def table(rows: list[dict]) -> str:
    lines = ["| model | variant | weights | peak RSS above baseline | ÷ weights | artifact | "
             "÷ weights | export s | time ÷ XNNPACK | fallback vs eager (max rel.) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    xnn = {r["model"]: r for r in rows if r["mode"] == "xnnpack" and "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['mode']} | | failed: {r['error']} | | | | | | |")
            continue
        w = r["weights"]
        ref = xnn.get(r["model"])
        ratio_t = f"{r['seconds'] / ref['seconds']:.2f}" if ref and r["mode"] != "xnnpack" else ""
        lines.append(
            f"| {r['model']} | {r['mode']} | {w / 1e6:.1f} MB | "
            f"{r['peak_above_baseline'] / 1e6:.0f} MB | {r['peak_above_baseline'] / w:.2f} | "
            f"{r['artifact'] / 1e6:.1f} MB | {r['artifact'] / w:.4f} | {r['seconds']:.1f} | "
            f"{ratio_t} | {r.get('fallback', '')} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:6])))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp100m,linear1g")
    ap.add_argument("--modes", default="trt,trt_ptd,xnnpack",
                    help="trt (weights in the .pte), trt_ptd (.pte + .ptd), trt_inline "
                         "(self-contained blob), xnnpack")
    ap.add_argument("--out", default=None,
                    help="write the table here: into the --section of a markdown file that "
                         "has one (docs/big-models.md), else the file is the table")
    ap.add_argument("--section", default="main",
                    help="the <!-- bench:NAME --> ... <!-- /bench:NAME --> block to replace")
    ap.add_argument("--no-run", action="store_true", help="skip the fallback runs")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_big_") as folder:
        for name in args.models.split(","):
            for mode in args.modes.split(","):
                row = run_child(name, mode, folder)
                if "error" not in row and mode != "xnnpack" and not args.no_run:
                    row["fallback"] = fallback_check(name, row["files"])
                for f in row.get("files", []) + [str(Path(folder) / f"{name}.ref")]:
                    Path(f).unlink(missing_ok=True)
                rows.append(row)
                print(json.dumps(row), flush=True)
    text = table(rows)
    print(text)
    if args.out:
        write_section(Path(args.out), args.section, text)


def write_section(path: Path, section: str, table: str) -> None:
    """Replaces the text between the section's markers, keeping the rest."""
    start, end = f"<!-- bench:{section} -->", f"<!-- /bench:{section} -->"
    doc = path.read_text() if path.exists() else ""
    if start in doc and end in doc:
        head, rest = doc.split(start, 1)
        tail = rest.split(end, 1)[1]
        doc = f"{head}{start}\n{table}\n{end}{tail}"
    else:
        doc = table + "\n"
    path.write_text(doc)


if __name__ == "__main__":
    main()
