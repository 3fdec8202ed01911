"""Affine weights (zero points, float offsets, input orders) against the
symmetric int4 / int8 weight-only path of the same shapes: engine bytes and
build seconds (TensorRT-RTX's CPU builder, every default capability), stored
bytes, and the onnxruntime fallback's output against x @ dequantize().T;
writes docs/evidence/affine-weights.md.

    nice -n 10 .venv/bin/python tools/bench/affine_weights.py [--no-write] [--dims 1024,2816,1024]

The model is Linear(d0, d1) - ReLU - Linear(d1, d2). Each affine variant's
Linears are PackedLinears with random codes, scales and zero points / offsets
(tests/quantization/test_affine_weights.py's random_packed); the symmetric
baselines are quantize(scheme="int4_weight_only" / "int8_weight_only") of a
float model of the same shape. Per variant: one export with the weights in a
.ptd (stored bytes = .pte + .ptd; the program run through executorch.runtime
on the fallback, 8 random inputs) and one with `inline_weights=True`, whose
blob carries the engine and its measured build time. No engine is executed
(no GPU here). Not a test.
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

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "evidence" / "affine-weights.md"

# name -> (bits or quantize() scheme, group (0: per channel), random_packed keywords
# (None: a symmetric baseline), the baseline it is compared with).
INT4_128, INT4_32, INT8 = ("int4 symmetric (quantize, group 128)",
                           "int4 symmetric (quantize, group 32)",
                           "int8 symmetric (quantize, per channel)")
VARIANTS = {
    INT4_128: ("int4_weight_only", 128, None, INT4_128),
    "int4 zero points (group 128)": (4, 128, dict(zero=True), INT4_128),
    "int4 offsets + input order (group 128)": (4, 128, dict(zero=False, offsets=True,
                                                            order=True), INT4_128),
    INT4_32: ("int4_weight_only", 32, None, INT4_32),
    "int4 zero points (group 32)": (4, 32, dict(zero=True), INT4_32),
    INT8: ("int8_weight_only", 0, None, INT8),
    "int8 zero points (per channel)": (8, 0, dict(zero=True), INT8),
}


def float_mlp(dims) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(dims[0], dims[1], bias=False), torch.nn.ReLU(),
                               torch.nn.Linear(dims[1], dims[2], bias=False)).eval()


def model_for(variant, dims):
    """(the model to export, its float reference over the same weights)."""
    from executorch_tensorrt.quantization import quantize
    from executorch_tensorrt.quantization.packed_linear import PackedLinear
    from tests.quantization.test_affine_weights import dequantized, random_packed

    bits, group, form, _ = variant
    if form is None:
        return quantize(float_mlp(dims), scheme=bits, group_size=group or 128), None
    layers = [PackedLinear(random_packed(f"{i}", out, inp, bits, group or inp, seed=i, **form))
              for i, (inp, out) in ((0, dims[:2]), (2, dims[1:]))]
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1]).eval()
    return model, dequantized(model)


def measure(name: str, variant, dims, tmp: Path) -> dict:
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.blob import read_blob
    from tests.helpers import artifact_bytes, tensorrt_blobs

    model, reference = model_for(variant, dims)
    reference = reference or model
    x = torch.randn(4, dims[0], generator=torch.Generator().manual_seed(1))
    stem = "".join(c if c.isalnum() else "_" for c in name)
    result = export_program(model, (x,), tmp / f"{stem}.pte", external_weights=True,
                            progress=None)
    method = Runtime.get().load_program(result.path, data_path=result.data_paths[0]) \
        .load_method("forward")
    generator, worst = torch.Generator().manual_seed(2), 0.0
    with torch.no_grad():
        for _ in range(8):
            xi = torch.randn(4, dims[0], generator=generator)
            want = reference(xi)
            worst = max(worst, float((method.execute([xi])[0] - want).abs().max())
                        / float(want.abs().max()))
    inline = tmp / f"{stem}-inline.pte"
    t0 = time.perf_counter()
    export_program(model, (x,), inline, inline_weights=True, progress=None, run_check=False,
                   write_expected_file=False)
    inline_s = time.perf_counter() - t0
    blobs = [read_blob(b) for b in tensorrt_blobs(inline)]
    build = [b.metadata.get("build_seconds") for b in blobs]
    return {"name": name, "stored": artifact_bytes(result),
            "engine": sum(len(b.engine) for b in blobs),
            "build_s": sum(build) if all(s is not None for s in build) else inline_s,
            "fallback": worst, "lines": sorted(set(result.report.quantization.values()))}


def table(rows: list[dict], dims) -> str:
    by_name = {r["name"]: r for r in rows}
    fp16 = 2 * (dims[0] * dims[1] + dims[1] * dims[2])
    out = [f"MLP {dims[0]}-{dims[1]}-{dims[2]} (fp16 weights {fp16 / 2**20:.2f} MiB), "
           "TensorRT-RTX 1.7 CPU builder, every default capability (SM75-SM121); each "
           "affine row is compared with the symmetric row of its bits and group above it:", "",
           "| weights | engine | engine / symmetric | build s | stored (.pte + .ptd) | "
           "stored / symmetric | stored / fp16 weights | fallback vs dequantized (rel.) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        b = by_name[VARIANTS[r["name"]][3]]
        out.append(f"| {r['name']} | {r['engine'] / 2**20:.2f} MiB | "
                   f"{r['engine'] / b['engine']:.3f} | {r['build_s']:.2f} | "
                   f"{r['stored'] / 2**20:.2f} MiB | {r['stored'] / b['stored']:.3f} | "
                   f"{r['stored'] / fp16:.3f} | {r['fallback']:.1e} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="1024,2816,1024")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    dims = tuple(int(d) for d in args.dims.split(","))
    sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
    import executorch_tensorrt  # noqa: F401 - registers the backend
    from executorch_tensorrt.output_files import write_bytes_whole

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        from quantization import warm_up  # tools/bench/: the first builder is not charged

        warm_up(Path(tmp))
        for name, variant in VARIANTS.items():
            rows.append(measure(name, variant, dims, Path(tmp)))
            print(f"{name}: {rows[-1]}", file=sys.stderr, flush=True)
    text = table(rows, dims)
    print(text)
    if not args.no_write:
        doc = ("# Affine weights against symmetric ones\n\n"
               "Produced by `tools/bench/affine_weights.py` "
               f"({time.strftime('%Y-%m-%d')}). Affine layers are PackedLinears with random "
               "codes; symmetric ones come from quantize(). Stored bytes include the scales, "
               "the group corrections and the input orders; engines were built, not run.\n\n"
               f"{text}\n")
        write_bytes_whole(DOC, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
