"""Quantized vs fp32 exports of the same models, one run: artifact and engine
sizes, export time, the fallback's error against the eager quantized model and
top-1 agreement of the logits; writes the table into docs/evidence/quantization.md.

    .venv/bin/python tools/bench/quantization.py [--inputs 1000] [--no-write]

Models (random weights): the 3-layer MLP 256-512-512-64 of the tests, and a
tiny transformers Llama from a config (2 layers, hidden 128, vocabulary 1024,
untied lm_head; logits of a 16-token sequence, no cache). Schemes: fp32,
int8_weight_only, int4_weight_only (group 64) through
executorch_tensorrt.quantization.quantize(). Per scheme, two exports:
weights in a .ptd (the default layout: artifact bytes = .pte + .ptd, export
time) and self-contained (`inline_weights=True`, whose blob carries a full
TensorRT-RTX engine built by the CPU builder: engine bytes). The .ptd
program then runs through the onnxruntime fallback (no GPU here runs
TensorRT engines) on `--inputs` random inputs (MLP rows; Llama token
positions), compared with the eager quantized model (max abs difference,
top-1 agreement) and with the eager fp32 model (top-1 agreement: accuracy
lost to quantization, reported, not asserted). Ratios are against the fp32 row
of the same model in the same run. Not a test: timings on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "quantization.md"
BEGIN, END = "<!-- bench:quantization:begin -->", "<!-- bench:quantization:end -->"
SCHEMES = ("fp32", "int8_weight_only", "int4_weight_only")
GROUP = 64


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 64)).eval()
    batch = 4

    def inputs(n, g):
        return [(torch.randn(batch, 256, generator=g),) for _ in range(max(1, n // batch))]
    return "MLP 256-512-512-64", model, inputs


class Logits(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(input_ids=ids, use_cache=False).logits[0]


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(0)
    model = Logits(LlamaForCausalLM(cfg).eval()).eval()
    seq = 16

    def inputs(n, g):
        return [(torch.randint(0, 1024, (1, seq), generator=g),) for _ in range(max(1, n // seq))]
    return "transformers Llama (2 layers, hidden 128, vocab 1024)", model, inputs


def fp32_weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def measure(name, fp32, make_inputs, n_inputs, tmp: Path) -> list[dict]:
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.blob import read_blob
    from executorch_tensorrt.quantization import quantize
    sys.path.insert(0, str(ROOT))
    from tests.helpers import tensorrt_blobs

    inputs = make_inputs(n_inputs, torch.Generator().manual_seed(1))
    rows = []
    for scheme in SCHEMES:
        model = fp32 if scheme == "fp32" else quantize(fp32, scheme=scheme, group_size=GROUP)
        stem = tmp / f"{len(rows)}-{scheme}"
        t0 = time.perf_counter()
        result = export_program(model, inputs[0], stem.with_suffix(".pte"),
                                external_weights=True, progress=None)
        export_s = time.perf_counter() - t0
        artifact = stem.with_suffix(".pte").stat().st_size + sum(
            p.stat().st_size for p in result.data_paths)
        inline = tmp / f"{len(rows)}-{scheme}-inline.pte"
        export_program(model, inputs[0], inline, inline_weights=True, progress=None,
                       write_expected_file=False)
        engines = [read_blob(b) for b in tensorrt_blobs(inline)]
        kinds = {b.metadata.get("engine", "full") for b in engines}
        engine_bytes = sum(len(b.engine) for b in engines)
        method = Runtime.get().load_program(
            stem.with_suffix(".pte"), data_path=result.data_paths[0]).load_method("forward")
        diff, agree_q, agree_f, count = 0.0, 0, 0, 0
        with torch.no_grad():
            for args in inputs:
                out = method.execute(list(args))[0]
                eager, eager_fp32 = model(*args), fp32(*args)
                diff = max(diff, float((out - eager).abs().max()))
                top = out.argmax(-1)
                agree_q += int((top == eager.argmax(-1)).sum())
                agree_f += int((top == eager_fp32.argmax(-1)).sum())
                count += top.numel()
        rows.append({"model": name, "scheme": scheme, "artifact": artifact,
                     "weights": fp32_weight_bytes(fp32), "engine": engine_bytes,
                     "engine_kinds": sorted(kinds), "export_s": export_s, "diff": diff,
                     "agree_q": agree_q / count, "agree_f": agree_f / count, "count": count,
                     "delegates": result.backends["forward"]})
        print(rows[-1], file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | scheme | artifact / fp32 weights | artifact / fp32 artifact | "
             "engine / fp32 engine | export time / fp32 | max abs diff vs eager quantized | "
             "top-1 vs eager quantized | top-1 vs eager fp32 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {}
    for r in rows:
        if r["scheme"] == "fp32":
            base[r["model"]] = r
        b = base[r["model"]]
        lines.append(
            f"| {r['model']} | {r['scheme']} | {r['artifact'] / r['weights']:.3f} | "
            f"{r['artifact'] / b['artifact']:.3f} | {r['engine'] / b['engine']:.3f} "
            f"({r['engine']:,} B) | {r['export_s'] / b['export_s']:.2f} ({r['export_s']:.1f} s) | "
            f"{r['diff']:.1e} | {100 * r['agree_q']:.1f} % of {r['count']} | "
            f"{100 * r['agree_f']:.1f} % |")
    return "\n".join(lines)


def write_doc(text: str, marks: tuple[str, str] = (BEGIN, END),
              script: str = "tools/bench/quantization.py") -> None:
    """Replaces the text between `marks` in docs/quantization.md (appends a
    section named after `script` the first time)."""
    begin, end = marks
    doc = DOC.read_text()
    block = f"{begin}\n{text}\n{end}"
    if begin in doc:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, doc,
                     flags=re.S)
    else:
        doc += f"\n## Measured: {script}\n\n{block}\n"
    DOC.write_text(doc)


def warm_up(tmp: Path) -> None:
    """Registries and TensorRT's first builder, not charged to the fp32 row."""
    from executorch_tensorrt.aot.export import export_program

    export_program(torch.nn.Linear(8, 4), (torch.randn(1, 8),), tmp / "warm.pte",
                   progress=None, write_expected_file=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=1000)
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument("--models", default="mlp,llama")
    args = ap.parse_args()
    import executorch_tensorrt  # noqa: F401 - registers the backend
    import tensorrt_rtx

    makers = {"mlp": mlp, "llama": llama}
    rows = []
    with tempfile.TemporaryDirectory(prefix="etrt-quant-bench-") as tmp:
        warm_up(Path(tmp))
        for key in args.models.split(","):
            name, model, make_inputs = makers[key]()
            rows += measure(name, model, make_inputs, args.inputs, Path(tmp))
    text = (f"Run {time.strftime('%Y-%m-%d')}: torch {torch.__version__}, TensorRT-RTX "
            f"{tensorrt_rtx.__version__} (CPU builder; engines of every default capability), "
            f"int4 group {GROUP}, {args.inputs} random inputs per model.\n\n" + table(rows))
    print(text)
    if not args.no_write:
        write_doc(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
