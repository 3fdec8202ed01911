"""PT2E-quantized (TensorRTQuantizer) vs fp32 exports of a small CNN and a
small ViT, one run; writes its table into docs/evidence/quantization.md (its own block).

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
quantized model (max abs difference; the same in steps of the output's own
quantization, output_steps.py, and how many output elements differ by more
than 2 steps; top-1 agreement) and with fp32 eager (top-1 agreement:
reported, not asserted). Where an element differs by more than 2 steps, the
single activation that, rounded the other way in eager, best reproduces the
fallback there is named under the table. Not a test: shared machine.
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

from output_steps import first_tie, output_and_steps, output_dividing  # noqa: E402
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


def inputs_and_models(fp32, shape, n_inputs: int) -> tuple[list, dict]:
    """The bench's random inputs and each scheme's model, calibrated in SCHEMES'
    order from the one generator the inputs came from (seed 1): what measure()
    and w8a8_floor.py run."""
    g = torch.Generator().manual_seed(1)
    inputs = [(torch.randn(shape, generator=g),) for _ in range(max(1, n_inputs // shape[0]))]
    return inputs, {scheme: fp32 if scheme == "fp32" else converted(fp32, scheme, shape, g)
                    for scheme in SCHEMES}


def measure(name, fp32, shape, n_inputs, tmp: Path) -> list[dict]:
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot import export as export_module
    from executorch_tensorrt.quantization import lower_qdq
    from executorch_tensorrt.blob import read_blob
    sys.path.insert(0, str(ROOT))
    from tests.helpers import tensorrt_blobs

    inputs, models = inputs_and_models(fp32, shape, n_inputs)
    weights = sum(p.numel() * 4 for p in fp32.parameters())
    rows = []
    real_flavor = export_module.target_flavor
    for scheme, model in models.items():
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
            reference = (lower_qdq(model, export_module.target_flavor(),
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
        steps_max, over_2, elements, worst = 0.0, 0, 0, None
        dividing = [0.0, 0] if scheme == "int8_w8a8" else None  # largest, elements > 2
        with torch.no_grad():
            for args in inputs:
                out = method.execute(list(args))[0]
                eager_fp32 = fp32(*args)
                eager, step = ((eager_fp32, None) if scheme == "fp32"
                               else output_and_steps(reference, args))
                diff = max(diff, float((out - eager).abs().max()))
                elements += out.numel()
                if step is not None:
                    in_steps = (out - eager).abs() / step
                    over_2 += int((in_steps > 2).sum())
                    if float(in_steps.max()) > steps_max:
                        steps_max, worst = float(in_steps.max()), args
                if dividing is not None:  # eager rounding x / scale, as QuantizeLinear does
                    d = (out - output_dividing(reference, args)).abs() / step
                    dividing = [max(dividing[0], float(d.max())), dividing[1] + int((d > 2).sum())]
                agree_q += int((out.argmax(-1) == eager.argmax(-1)).sum())
                agree_f += int((out.argmax(-1) == eager_fp32.argmax(-1)).sum())
                count += out.shape[0]
        tie = first_tie(reference, worst) if steps_max > 2 else None
        rows.append({"model": name, "scheme": scheme, "artifact": artifact, "weights": weights,
                     "engine": engine, "export_s": export_s, "diff": diff,
                     "steps": steps_max, "over_2": over_2, "elements": elements, "tie": tie,
                     "dividing": dividing,
                     "agree_q": agree_q / count, "agree_f": agree_f / count, "count": count,
                     "layers": len(result.report.quantization),
                     "all_taken": not result.report.rejected})
        print(rows[-1], file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | scheme | quantized layers | artifact / fp32 weights | engine / fp32 engine "
             "| export time / fp32 | max abs diff vs eager quantized | largest diff in output "
             "steps | elements > 2 steps | top-1 vs eager quantized | top-1 vs eager fp32 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base, notes = {}, []
    for r in rows:
        base.setdefault(r["model"], r)
        b = base[r["model"]]
        label = r["scheme"] + (" (flavour stand-in: standard TensorRT)"
                               if r["scheme"] == "int8_w8a8" else "")
        steps, over = (("", "") if r["scheme"] == "fp32" else
                       (f"{r['steps']:.2g}", f"{r['over_2']} of {r['elements']:,}"))
        lines.append(
            f"| {r['model']} | {label} | {r['layers']} | {r['artifact'] / r['weights']:.3f} | "
            f"{r['engine'] / b['engine']:.3f} ({r['engine']:,} B) | "
            f"{r['export_s'] / b['export_s']:.2f} ({r['export_s']:.1f} s) | "
            f"{r['diff']:.1e} | {steps} | {over} | {100 * r['agree_q']:.1f} % of {r['count']} | "
            f"{100 * r['agree_f']:.1f} % |")
        if r["steps"] > 2 and r["scheme"] != "fp32":
            note = f"- {r['model']}, {label}: {r['steps']:.2g} steps on the worst element."
            if r["dividing"] is not None:
                note += (f" Against an eager model rounding x / scale (QuantizeLinear's formula) "
                         f"instead of x * (1 / scale): {r['dividing'][0]:.2g} steps, "
                         f"{r['dividing'][1]} elements > 2.")
            if r["tie"] is not None:
                t = r["tie"]
                note += (f" A tie on that input: {t.quantizer}, element {list(t.index)}: "
                         f"x * (1 / scale) = {t.multiplied:.8g}, x / scale = {t.divided:.8g}.")
            notes.append(note)
    return "\n".join(lines + ([""] + notes if notes else []))


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
