"""FP4 (NVFP4) weight-only against fp32 and int4 on MLPs, all for SM120: artifact
bytes, engine bytes, and the fallback's output against the eager quantized model;
writes the table into docs/evidence/quantization.md.

    nice -n 10 .venv/bin/python tools/bench/fp4_size.py [--no-write]

Per model and scheme: one export with the weights in a .ptd (artifact = .pte +
.ptd; its program run through executorch.runtime on the onnxruntime fallback
against the eager quantized model, on 16 random inputs) and one with
`inline_weights=True`, whose blob carries the engine TensorRT-RTX's CPU builder
built for SM120 (FP4 needs SM120; the other schemes are built for the same
target so the engines compare). No engine is executed. Not a test.
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
from quantization import ROOT, fp32_weight_bytes, warm_up, write_doc  # noqa: E402

MARKS = ("<!-- bench:fp4:begin -->", "<!-- bench:fp4:end -->")
SCHEMES = ("fp32", "int4_weight_only", "fp4_weight_only")
GROUP = 64
TARGETS = ("SM120",)
MODELS = {"256-512-64 (the test's MLP)": (256, 512, 64), "1024-1024-1024": (1024, 1024, 1024)}


def mlp(dims: tuple[int, int, int]) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(dims[0], dims[1]), torch.nn.ReLU(),
                               torch.nn.Linear(dims[1], dims[2])).eval()


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) / float(b.abs().max())


def measure(fp32, model, dims, tmp: Path, name: str) -> dict:
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.blob import read_blob
    sys.path.insert(0, str(ROOT))
    from tests.helpers import artifact_bytes, tensorrt_blobs

    x = torch.randn(4, dims[0], generator=torch.Generator().manual_seed(1))
    t0 = time.perf_counter()
    result = export_program(model, (x,), tmp / f"{name}.pte", external_weights=True,
                            progress=None, compute_capabilities=TARGETS)
    export_s = time.perf_counter() - t0
    method = Runtime.get().load_program(result.path, data_path=result.data_paths[0]) \
        .load_method("forward")
    generator = torch.Generator().manual_seed(2)
    worst = worst_quant = 0.0
    with torch.no_grad():
        for _ in range(16):
            xi = torch.randn(4, dims[0], generator=generator)
            eager = model(xi)
            worst = max(worst, relative(method.execute([xi])[0], eager))
            worst_quant = max(worst_quant, relative(eager, fp32(xi)))
    artifact = artifact_bytes(result)
    inline = tmp / f"{name}-inline.pte"
    export_program(model, (x,), inline, inline_weights=True, progress=None,
                   compute_capabilities=TARGETS, run_check=False, write_expected_file=False)
    engine = sum(len(read_blob(b).engine) for b in tensorrt_blobs(inline))
    return {"artifact": artifact, "engine": engine, "fallback": worst, "quant": worst_quant,
            "export_s": export_s}


def table(rows: list[dict]) -> str:
    lines = ["| MLP | fp32 weights | scheme | artifact / fp32 weights | engine (SM120) | "
             "engine / fp32 engine | fallback vs eager quantized (max rel.) | "
             "eager quantized vs eager fp32 (max rel.) | export time |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {r["model"]: r["engine"] for r in rows if r["scheme"] == "fp32"}
    for r in rows:
        lines.append(f"| {r['model']} | {r['weights']:,} B | {r['scheme']} | "
                     f"{r['artifact'] / r['weights']:.4f} | {r['engine']:,} B | "
                     f"{r['engine'] / base[r['model']]:.3f} | {r['fallback']:.1e} | "
                     f"{r['quant']:.1e} | {r['export_s']:.1f} s |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    import executorch_tensorrt  # noqa: F401 - registers the backend
    import tensorrt_rtx

    from executorch_tensorrt.quantization import quantize

    rows = []
    with tempfile.TemporaryDirectory(prefix="etrt-fp4-") as tmp:
        warm_up(Path(tmp))
        for label, dims in MODELS.items():
            fp32 = mlp(dims)
            for scheme in SCHEMES:
                model = fp32 if scheme == "fp32" else quantize(fp32, scheme=scheme,
                                                                group_size=GROUP)
                row = measure(fp32, model, dims, Path(tmp), f"{dims[1]}-{scheme}")
                rows.append({"model": label, "scheme": scheme,
                             "weights": fp32_weight_bytes(fp32), **row})
                print(rows[-1], file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    text = (f"Run {time.strftime('%Y-%m-%d')}: torch {torch.__version__}, TensorRT-RTX "
            f"{tensorrt_rtx.__version__} (CPU builder, engines for SM120 only), int4 group "
            f"{GROUP}, weights and biases counted as fp32 weights, load average {load:.1f} at "
            "the end.\n\n" + table(rows))
    print(text)
    if not args.no_write:
        write_doc(text, MARKS, "tools/bench/fp4_size.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
