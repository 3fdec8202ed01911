"""The memory report's "on the onnxruntime fallback" line against the peak the
fallback really reaches: tiny Llamas of several sizes exported with
llm.export, each loaded and run (prompt, then every cache position) by
ExecuTorch in a child process of its own through the onnxruntime fallback.

    .venv/bin/python tools/bench/ort_memory.py [--out docs/evidence/ort-memory.md]

The child reads its peak resident memory (VmHWM, reset after imports) above
its resident memory before the load: weights the program maps and reads,
the state, onnxruntime's copies, its arena, and what loading onnxruntime and
creating a session costs whatever the model. That fixed part is the tiny
model's measured peak less its (sub-MiB) predicted figure; each other row's
error is taken after subtracting it. The least-squares line of the measured
peaks over the predicted ones is printed as a check (slope 1: the line
grows as the peak does). Not a test (tests/llm/test_memory_report.py checks one size
at 10 %); timing-free, but resident memory moves by a few MB between runs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_SEQ, MAX_CONTEXT = 4, 48
# name -> (hidden, intermediate, vocabulary, layers, dtype)
SIZES = {
    "tiny": (32, 64, 128, 2, "float32"),
    "16 MB": (256, 1024, 4096, 2, "float32"),
    "94 MB": (512, 2048, 8192, 4, "float32"),
    "60 MB": (512, 1024, 8192, 3, "float32"),
    "94 MB as fp16 (onnxruntime casts to fp32)": (512, 2048, 8192, 4, "float16"),
}

CHILD = r"""
import sys, torch
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
import executorch_tensorrt
from executorch.runtime import Runtime
runtime = Runtime.get()
torch.ones(1)
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
method = runtime.load_program(sys.argv[1]).load_method("forward")
seq, ctx = int(sys.argv[2]), int(sys.argv[3])
method.execute((torch.arange(1, seq + 1).reshape(1, seq), torch.arange(seq)))
for pos in range(seq, ctx):  # every cache position written
    method.execute((torch.tensor([[pos % 90 + 1]]), torch.tensor([pos])))
print(status("VmHWM") - before)
"""


def config(hidden, inter, vocab, layers) -> dict:
    return {"model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
            "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": 8,
            "num_key_value_heads": 2, "max_position_embeddings": 64, "bos_token_id": 1,
            "eos_token_id": 2, "use_cache": True}


def measured_peak(pte: Path) -> int:
    """Peak resident growth of a child that loads `pte` and fills its cache."""
    from executorch_tensorrt.runtime.executor import FALLBACK_ENV

    run = subprocess.run([sys.executable, "-c", CHILD, str(pte), str(MAX_SEQ),
                          str(MAX_CONTEXT)], capture_output=True, text=True, timeout=900,
                         env={**os.environ, FALLBACK_ENV: "onnxruntime"})
    if run.returncode != 0:
        raise RuntimeError(f"the child failed on {pte}:\n{run.stderr[-3000:]}")
    return int(run.stdout.split()[-1])


def fit(xs: list[int], ys: list[int]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="a Markdown file for docs/evidence")
    ap.add_argument("--repeat", type=int, default=1, help="child runs per size (the lowest)")
    args = ap.parse_args(argv)
    from executorch_tensorrt import llm
    from executorch_tensorrt.program.memory_report import FALLBACK_FIXED, size_text

    rows = []
    with tempfile.TemporaryDirectory(prefix="etrt-ort-memory-") as tmp:
        for name, (hidden, inter, vocab, layers, dtype) in SIZES.items():
            pte = Path(tmp) / f"{len(rows)}.pte"
            result = llm.export(config(hidden, inter, vocab, layers), max_seq_len=MAX_SEQ,
                                max_context_len=MAX_CONTEXT, dtype=dtype, output=pte,
                                progress=None, run_check=False, record_memory=False)
            report = result.memory
            peak = min(measured_peak(pte) for _ in range(args.repeat))
            rows.append({"model": name, "weights_bytes": report.weights_bytes,
                         "kv_bytes": report.kv_bytes, "fallback_bytes": report.fallback_bytes,
                         "fallback_extra": report.to_json()["fallback_extra"],
                         "measured_peak_bytes": peak})
            print(json.dumps(rows[-1]), flush=True)
            pte.unlink()
    fixed = rows[0]["measured_peak_bytes"] - rows[0]["fallback_bytes"]  # the tiny model
    intercept, slope = fit([r["fallback_bytes"] for r in rows],
                           [r["measured_peak_bytes"] for r in rows])
    lines = [f"# The onnxruntime fallback's memory: the report against the measured peak",
             "", f"{datetime.date.today()}, `tools/bench/ort_memory.py`, onnxruntime-fallback "
             f"runs of tiny Llamas (random weights, max_seq_len {MAX_SEQ}, max_context_len "
             f"{MAX_CONTEXT}), each in a child process; load average "
             f"{os.getloadavg()[0]:.1f}.", "",
             f"Fixed part (the tiny model's peak less its line): {size_text(int(fixed))}; the "
             f"report states {size_text(FALLBACK_FIXED)}. Least-squares line of measured over "
             f"predicted: intercept {size_text(int(intercept))}, slope {slope:.3f}.", "",
             "| model | weights | report: on the fallback | measured peak | measured - fixed | "
             "error |", "|---|---|---|---|---|---|"]
    for r in rows[1:]:
        net = r["measured_peak_bytes"] - fixed
        r["error"] = net / r["fallback_bytes"] - 1
        lines.append(f"| {r['model']} | {size_text(r['weights_bytes'])} | "
                     f"{size_text(r['fallback_bytes'])} | {size_text(r['measured_peak_bytes'])} | "
                     f"{size_text(int(net))} | {r['error']:+.1%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        sys.path.insert(0, str(ROOT / "src"))
        from executorch_tensorrt.output_files import write_bytes_whole

        write_bytes_whole(Path(args.out), text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
