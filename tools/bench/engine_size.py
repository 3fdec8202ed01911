"""Engine bytes against weight bytes: is an engine's size its weights plus a
fixed part? One run over three MLP sizes (about 0.5, 8 and 64 MB of fp32
weights) for fp32, int8_weight_only and int4_weight_only (group 64); writes
the table into docs/quantization.md.

    nice -n 10 .venv/bin/python tools/bench/engine_size.py [--no-write] [--widths 256,1024,2816]

Each MLP is Linear(d, d) - ReLU - Linear(d, d) with random weights
(2 d^2 fp32 weights). Each model is exported with `inline_weights=True`, whose
blob carries a full TensorRT-RTX engine built by the CPU builder for every
default capability; the engine bytes are read from the blob. Per scheme a
least-squares line engine = fixed + slope x fp32 weight bytes over the three
sizes gives the fixed part (bytes every engine carries whatever its weights)
and the slope (engine bytes per fp32 weight byte: 1 if the weights are stored
fp32, 0.25 int8, 0.125 int4 plus its scales). No run check, no reference:
sizes only. Not a test.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quantization import (ROOT, fp32_weight_bytes, warm_up,  # noqa: E402  (tools/bench/)
                          write_doc)

MARKS = ("<!-- bench:engine-size:begin -->", "<!-- bench:engine-size:end -->")
SCHEMES = ("fp32", "int8_weight_only", "int4_weight_only")
GROUP = 64


def mlp(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width)).eval()


def engine_bytes(model, x, path: Path) -> tuple[int, float]:
    """(engine bytes of an inline-weights export, export seconds)."""
    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.blob import read_blob
    sys.path.insert(0, str(ROOT))
    from tests.helpers import tensorrt_blobs

    t0 = time.perf_counter()
    export_program(model, (x,), path, inline_weights=True, progress=None,
                   write_expected_file=False, run_check=False)
    seconds = time.perf_counter() - t0
    blobs = [read_blob(b) for b in tensorrt_blobs(path)]
    if not blobs or any(not b.engine for b in blobs):
        raise SystemExit(f"{path}: no TensorRT engine in the program (is TensorRT-RTX installed?)")
    size = sum(len(b.engine) for b in blobs)
    path.unlink()
    return size, seconds


def fit(points: list[tuple[int, int]]) -> tuple[float, float]:
    """Least squares y = fixed + slope x: (slope, fixed)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = (sum((x - mx) * (y - my) for x, y in points)
             / sum((x - mx) ** 2 for x, _ in points))
    return slope, my - slope * mx


def table(rows: list[dict]) -> str:
    lines = ["| MLP (2 x Linear(d, d)) | fp32 weights | scheme | engine | engine / fp32 weights | "
             "engine / fp32 engine | export time |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    base = {r["width"]: r["engine"] for r in rows if r["scheme"] == "fp32"}
    for r in rows:
        lines.append(f"| d = {r['width']} | {r['weights']:,} B | {r['scheme']} | "
                     f"{r['engine']:,} B | {r['engine'] / r['weights']:.3f} | "
                     f"{r['engine'] / base[r['width']]:.3f} | {r['export_s']:.1f} s |")
    lines += ["", "| scheme | slope (engine bytes per fp32 weight byte) | fixed part | "
                  "largest residual of the fit |", "| --- | --- | --- | --- |"]
    for scheme in SCHEMES:
        points = [(r["weights"], r["engine"]) for r in rows if r["scheme"] == scheme]
        slope, fixed = fit(points)
        residual = max(abs(y - (fixed + slope * x)) for x, y in points)
        lines.append(f"| {scheme} | {slope:.4f} | {fixed:,.0f} B | {residual:,.0f} B |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="256,1024,2816",
                    help="MLP widths d (2 d^2 fp32 weights each; multiples of 64)")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    import executorch_tensorrt  # noqa: F401 - registers the backend
    import tensorrt_rtx

    from executorch_tensorrt.quantization import quantize

    rows = []
    with tempfile.TemporaryDirectory(prefix="etrt-engine-size-") as tmp:
        warm_up(Path(tmp))
        for width in (int(w) for w in args.widths.split(",")):
            fp32 = mlp(width)
            x = torch.randn(4, width, generator=torch.Generator().manual_seed(1))
            for scheme in SCHEMES:
                model = fp32 if scheme == "fp32" else quantize(fp32, scheme=scheme,
                                                                group_size=GROUP)
                size, seconds = engine_bytes(model, x, Path(tmp) / f"{width}-{scheme}.pte")
                rows.append({"width": width, "scheme": scheme, "engine": size,
                             "weights": fp32_weight_bytes(fp32), "export_s": seconds})
                print(rows[-1], file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    text = (f"Run {time.strftime('%Y-%m-%d')}: torch {torch.__version__}, TensorRT-RTX "
            f"{tensorrt_rtx.__version__} (CPU builder; engines of every default capability), "
            f"int4 group {GROUP}, load average {load:.1f} at the end.\n\n" + table(rows))
    print(text)
    if not args.no_write:
        write_doc(text, MARKS, "tools/bench/engine_size.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
