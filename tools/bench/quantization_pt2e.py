"""PT2E-quantized (TensorRTQuantizer) vs fp32 exports of a small CNN and a
small ViT, one run; writes its table into docs/quantization.md (its own block).

    .venv/bin/python tools/bench/quantization_pt2e.py [--inputs 1000] [--no-write]

Models (random weights): a CNN classifier (Conv2d 3-32, Conv2d 32-64 stride 2,
Linear 4096-10, 16x16 images) and a transformers ViT from a config (2 layers,
hidden 64, 32x32 images, patch 8, 10 labels; its patch embedding is a Conv2d).
Schemes: fp32, int8_weight_only, fp8_w8a8 (exported for SM89 and SM120 only:
FP8 needs 8.9+), int8_w8a8 (standard TensorRT only, which is not installable
here: the capability check is told the flavour is standard TensorRT, and
TensorRT-RTX's builder builds the W8A8 graph; labelled in the table). Each
is calibrated on 32 random inputs, converted with convert_pt2e and exported
twice like tools/bench/quantization.py: weights in a .ptd (artifact bytes,
export time) and inline (engine bytes). The .ptd program runs through the
onnxruntime fallback on `--inputs` random images, compared with the eager
quantized model (max abs difference in units of the smallest quantization
step of the graph's activations or weights, top-1 agreement) and with fp32
eager (top-1 agreement: reported, not asserted). Not a test: shared machine.
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

from quantization import warm_up, write_doc  # noqa: E402  (tools/bench/quantization.py)

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- bench:quantization-pt2e:begin -->", "<!-- bench:quantization-pt2e:end -->"
SCHEMES = ("fp32", "int8_weight_only", "fp8_w8a8", "int8_w8a8")
FP8_TARGETS = ("SM89", "SM120")


def cnn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 10)).eval()
    return "CNN (2 Conv2d + Linear, 16x16)", model, (8, 3, 16, 16)


class Logits(torch.nn.Module):
    def __init__(self, vit):
        super().__init__()
        self.vit = vit

    def forward(self, pixels):
        return self.vit(pixel_values=pixels).logits


def vit():
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, image_size=32, patch_size=8, num_labels=10)
    torch.manual_seed(0)
    return ("transformers ViT (2 layers, hidden 64, 32x32, patch 8)",
            Logits(ViTForImageClassification(cfg).eval()).eval(), (8, 3, 32, 32))


def converted(fp32, scheme, shape, g):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from executorch_tensorrt.quantization import TensorRTQuantizer

    gm = prepare_pt2e(torch.export.export(fp32, (torch.randn(shape, generator=g),)).module(),
                      TensorRTQuantizer(scheme))
    with torch.no_grad():
        for _ in range(32 // shape[0]):
            gm(torch.randn(shape, generator=g))
    return convert_pt2e(gm)


def smallest_step(gm) -> float:
    """The smallest scale of the graph's Q/DQ nodes (one quantization step)."""
    steps = []
    for node in gm.graph.nodes:
        if "quantize" in str(node.target) and len(node.args) > 1:
            s = node.args[1]
            if isinstance(s, torch.fx.Node):
                s = float(getattr(gm, s.target).min())
            steps.append(float(s))
    return min(steps) if steps else float("nan")


def measure(name, fp32, shape, n_inputs, tmp: Path) -> list[dict]:
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot import export as export_module
    from executorch_tensorrt.blob import read_blob
    sys.path.insert(0, str(ROOT))
    from tests.helpers import tensorrt_blobs

    g = torch.Generator().manual_seed(1)
    inputs = [(torch.randn(shape, generator=g),) for _ in range(max(1, n_inputs // shape[0]))]
    weights = sum(p.numel() * 4 for p in fp32.parameters())
    rows = []
    real_flavor = export_module.target_flavor
    for scheme in SCHEMES:
        model = fp32 if scheme == "fp32" else converted(fp32, scheme, shape, g)
        options = {"compute_capabilities": FP8_TARGETS} if scheme == "fp8_w8a8" else {}
        # W8A8 needs standard TensorRT: a labelled flavour stand-in (the table says so)
        export_module.target_flavor = ((lambda: "tensorrt") if scheme == "int8_w8a8"
                                       else real_flavor)
        try:
            stem = tmp / f"{len(rows)}-{scheme}"
            t0 = time.perf_counter()
            result = export_module.export_program(model, inputs[0], stem.with_suffix(".pte"),
                                                  external_weights=True, progress=None,
                                                  **options)
            export_s = time.perf_counter() - t0
            inline = tmp / f"{len(rows)}-{scheme}-inline.pte"
            export_module.export_program(model, inputs[0], inline, inline_weights=True,
                                         progress=None, write_expected_file=False, **options)
            reference = (export_module.lower_qdq(model, export_module.target_flavor(),
                                                 options.get("compute_capabilities"), False)[0]
                         if scheme != "fp32" else fp32)
        finally:
            export_module.target_flavor = real_flavor
        artifact = stem.with_suffix(".pte").stat().st_size + sum(
            p.stat().st_size for p in result.data_paths)
        engine = sum(len(read_blob(b).engine) for b in tensorrt_blobs(inline))
        method = Runtime.get().load_program(
            stem.with_suffix(".pte"), data_path=result.data_paths[0]).load_method("forward")
        diff, agree_q, agree_f, count = 0.0, 0, 0, 0
        with torch.no_grad():
            for args in inputs:
                out = method.execute(list(args))[0]
                eager, eager_fp32 = reference(*args), fp32(*args)
                diff = max(diff, float((out - eager).abs().max()))
                agree_q += int((out.argmax(-1) == eager.argmax(-1)).sum())
                agree_f += int((out.argmax(-1) == eager_fp32.argmax(-1)).sum())
                count += out.shape[0]
        rows.append({"model": name, "scheme": scheme, "artifact": artifact, "weights": weights,
                     "engine": engine, "export_s": export_s, "diff": diff,
                     "step": smallest_step(model) if scheme != "fp32" else float("nan"),
                     "agree_q": agree_q / count, "agree_f": agree_f / count, "count": count,
                     "layers": len(result.report.quantization),
                     "all_taken": not result.report.rejected})
        print(rows[-1], file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | scheme | quantized layers | artifact / fp32 weights | engine / fp32 engine "
             "| export time / fp32 | max abs diff vs eager quantized (steps) | top-1 vs eager "
             "quantized | top-1 vs eager fp32 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {}
    for r in rows:
        base.setdefault(r["model"], r)
        b = base[r["model"]]
        label = r["scheme"] + (" (flavour stand-in: standard TensorRT)"
                               if r["scheme"] == "int8_w8a8" else "")
        steps = "" if r["scheme"] == "fp32" else f" ({r['diff'] / r['step']:.1e})"
        lines.append(
            f"| {r['model']} | {label} | {r['layers']} | {r['artifact'] / r['weights']:.3f} | "
            f"{r['engine'] / b['engine']:.3f} ({r['engine']:,} B) | "
            f"{r['export_s'] / b['export_s']:.2f} ({r['export_s']:.1f} s) | "
            f"{r['diff']:.1e}{steps} | {100 * r['agree_q']:.1f} % of {r['count']} | "
            f"{100 * r['agree_f']:.1f} % |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=1000)
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument("--models", default="cnn,vit")
    args = ap.parse_args()
    import executorch_tensorrt  # noqa: F401 - registers the backend
    import tensorrt_rtx

    makers = {"cnn": cnn, "vit": vit}
    rows = []
    with tempfile.TemporaryDirectory(prefix="etrt-pt2e-bench-") as tmp:
        warm_up(Path(tmp))
        for key in args.models.split(","):
            name, model, shape = makers[key]()
            rows += measure(name, model, shape, args.inputs, Path(tmp))
    text = (f"Run {time.strftime('%Y-%m-%d')}: torch {torch.__version__}, TensorRT-RTX "
            f"{tensorrt_rtx.__version__} (CPU builder; fp32/int8 engines for every default "
            f"capability, fp8 for {', '.join(FP8_TARGETS)}), PT2E TensorRTQuantizer calibrated "
            f"on 32 random inputs, {args.inputs} random inputs per model.\n\n" + table(rows))
    print(text)
    if not args.no_write:
        write_doc(text, (BEGIN, END), "tools/bench/quantization_pt2e.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
