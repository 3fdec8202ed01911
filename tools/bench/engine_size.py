"""Engine bytes against weight bytes: is an engine's size its weights plus a
fixed part? One run over three MLP sizes (about 0.5, 8 and 64 MB of fp32
weights) for fp32, int8_weight_only, int4_weight_only (group 64) and
fp8_w8a8; writes the table into docs/evidence/quantization.md.

    nice -n 10 .venv/bin/python tools/bench/engine_size.py [--no-write] [--widths 256,1024,2816]

Each MLP is Linear(d, d) - ReLU - Linear(d, d) with random weights
(2 d^2 fp32 weights). Each model is exported with `inline_weights=True`, whose
blob carries a full TensorRT-RTX engine built by the CPU builder for every
default capability (fp8_w8a8: those of SM89 or newer, the scheme's minimum);
the engine bytes are read from the blob. The artifact is a second export in
the default layout with the weights in a .ptd (.pte + .ptd bytes: the weights
stored once, the issue's measure); the inline .pte, whose engine and ONNX model
each carry the weights, is reported beside it. fp8_w8a8 goes through
quantize(), calibrated on CALIBRATION random batches, and its ONNX is also
given to the builder for every default capability, to record what it says
below SM89. Per scheme a
least-squares line engine = fixed + slope x fp32 weight bytes over the three
sizes gives the fixed part (bytes every engine carries whatever its weights)
and the slope (engine bytes per fp32 weight byte: 1 if the weights are stored
fp32, 0.25 int8 or fp8, 0.125 int4 plus its scales). No run check, no reference:
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
SCHEMES = ("fp32", "int8_weight_only", "int4_weight_only", "fp8_w8a8")
GROUP = 64
CALIBRATION = 4  # random batches for fp8_w8a8's activation scales


def mlp(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width)).eval()


def scheme_targets(scheme: str) -> tuple[str, ...] | None:
    """The builder's targets: None (every default capability) unless the scheme
    needs a newer GPU, then the default capabilities it can run on."""
    from executorch_tensorrt.quantization.registry import RTX_DEFAULT_CAPABILITIES, SCHEMES

    low = SCHEMES[scheme].min_capability if scheme in SCHEMES else None
    return None if low is None else tuple(c for c in RTX_DEFAULT_CAPABILITIES
                                          if int(c.removeprefix("SM")) >= low)


def sizes(model, x, stem: Path, targets) -> dict:
    """Engine bytes and inline .pte bytes of an inline-weights export (and its
    seconds), artifact bytes of a .ptd export, and the first blob's ONNX."""
    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.blob import read_blob
    sys.path.insert(0, str(ROOT))
    from tests.helpers import tensorrt_blobs

    options = {"compute_capabilities": targets} if targets else {}
    inline = stem.with_suffix(".inline.pte")
    t0 = time.perf_counter()
    export_program(model, (x,), inline, inline_weights=True, progress=None,
                   write_expected_file=False, run_check=False, **options)
    seconds = time.perf_counter() - t0
    blobs = [read_blob(b) for b in tensorrt_blobs(inline)]
    if not blobs or any(not b.engine for b in blobs):
        raise SystemExit(f"{inline}: no TensorRT engine in the program (is TensorRT-RTX "
                         "installed?)")
    result = export_program(model, (x,), stem.with_suffix(".pte"), external_weights=True,
                            progress=None, write_expected_file=False, run_check=False,
                            **options)
    files = [stem.with_suffix(".pte"), *result.data_paths]
    found = {"engine": sum(len(b.engine) for b in blobs), "inline_pte": inline.stat().st_size,
             "artifact": sum(f.stat().st_size for f in files), "export_s": seconds,
             "onnx": blobs[0].onnx}
    for f in [inline, *files]:
        f.unlink()
    return found


def builder_says(onnx: bytes) -> str:
    """What TensorRT-RTX's builder says to `onnx` (weights inline) for every
    default capability: 'built' or its error."""
    from executorch_tensorrt.errors import EngineBuildError
    from executorch_tensorrt.quantization.registry import RTX_DEFAULT_CAPABILITIES
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.options import BuildOptions

    try:
        built = build_engine(onnx, BuildOptions(RTX_DEFAULT_CAPABILITIES), progress=None)
    except EngineBuildError as e:
        return "refused: " + " ".join(str(e).split())
    return f"built ({len(built.engine):,} B)"


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
             "engine / fp32 engine | artifact / fp32 weights | inline .pte / fp32 weights | "
             "export time |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {r["width"]: r["engine"] for r in rows if r["scheme"] == "fp32"}
    for r in rows:
        lines.append(f"| d = {r['width']} | {r['weights']:,} B | {r['scheme']} | "
                     f"{r['engine']:,} B | {r['engine'] / r['weights']:.3f} | "
                     f"{r['engine'] / base[r['width']]:.3f} | "
                     f"{r['artifact'] / r['weights']:.3f} ({r['artifact']:,} B) | "
                     f"{r['inline_pte'] / r['weights']:.3f} | {r['export_s']:.1f} s |")
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
    from executorch_tensorrt.quantization.registry import RTX_DEFAULT_CAPABILITIES

    rows, probe = [], None
    with tempfile.TemporaryDirectory(prefix="etrt-engine-size-") as tmp:
        warm_up(Path(tmp))
        for width in (int(w) for w in args.widths.split(",")):
            fp32 = mlp(width)
            g = torch.Generator().manual_seed(1)
            x = torch.randn(4, width, generator=g)
            for scheme in SCHEMES:
                if scheme == "fp32":
                    model = fp32
                elif scheme == "fp8_w8a8":
                    batches = [(torch.randn(4, width, generator=g),) for _ in range(CALIBRATION)]
                    model = quantize(fp32, (x,), scheme=scheme, calibration=batches)
                else:
                    model = quantize(fp32, scheme=scheme, group_size=GROUP)
                targets = scheme_targets(scheme)
                found = sizes(model, x, Path(tmp) / f"{width}-{scheme}", targets)
                if targets and probe is None:  # the smallest model is enough
                    probe = f"d = {width}, {scheme}: {builder_says(found['onnx'])}"
                del found["onnx"]
                rows.append({"width": width, "scheme": scheme,
                             "weights": fp32_weight_bytes(fp32), **found})
                print(rows[-1], file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    newer = ", ".join(f"{s} for {', '.join(scheme_targets(s))}" for s in SCHEMES
                      if scheme_targets(s))
    text = (f"Run {time.strftime('%Y-%m-%d')}: torch {torch.__version__}, TensorRT-RTX "
            f"{tensorrt_rtx.__version__} (CPU builder; engines of every default capability, "
            f"{newer}), int4 group {GROUP}, fp8_w8a8 calibrated on {CALIBRATION} random "
            f"batches, load average {load:.1f} at the end.\n\n" + table(rows)
            + (f"\n\nThe builder given the whole default list "
               f"({', '.join(RTX_DEFAULT_CAPABILITIES)}): {probe}" if probe else ""))
    print(text)
    if not args.no_write:
        write_doc(text, MARKS, "tools/bench/engine_size.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
