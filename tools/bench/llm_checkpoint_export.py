"""An 8B-shaped int4 GPTQ checkpoint exported on this machine: peak memory
against the checkpoint's bytes, and the artifact against the bf16 model's.

    .venv/bin/python tools/bench/llm_checkpoint_export.py [--layers 32]
        [--folder DIR] [--max-seq-len 16] [--max-context-len 64] [--keep]
        [--quantize int8_weight_only] [--write]

A Llama-3-8B config (llm_big_export.LLAMA3_8B) with `--layers` decoder
layers, written as AutoGPTQ publishes it (tests/quantization/
checkpoint_writers.write_gptq_shards: int4, group 128, symmetric, random
codes, float16 scales, float16 embeddings, norms and unquantized lm_head),
shard by shard. Then the documented command, `executorch-tensorrt
llm-export --model DIR --dtype float16 --external-weights`, as a child of
this script, its resident memory (and its run check child's) sampled every
0.25 s (llm_big_export.run_measured). At the end: the peaks against the
checkpoint's bytes (what the published files hold: codes, scales, zero
points, g_idx and the float16 tensors), the .pte + .ptd against the bf16
model's bytes (llm_big_export.weight_bytes), and a JSON line of the numbers.
Not a unit test: the 32-layer run writes 5.7 GB and takes several minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tests" / "quantization"))

from llm_big_export import LLAMA3_8B, report_peaks, run_measured, weight_bytes  # noqa: E402

PEAK_GOAL, SIZE_GOAL = 1.3, 0.30  # peak / checkpoint bytes, artifact / bf16 bytes
ROOT = HERE.parents[1]
EVIDENCE = ROOT / "docs" / "evidence" / "checkpoints.md"


def write_evidence(numbers: dict, peaks, command: list[str]) -> None:
    """Appends a dated section: the command, each process's peak and its phase, the ratios."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    shown = " ".join(["executorch-tensorrt", *command[1:]])
    lines = [f"\n## {numbers['layers']} layers, measured by "
             f"tools/bench/llm_checkpoint_export.py ({stamp})\n", f"`{shown}`\n",
             f"- checkpoint {numbers['checkpoint_bytes'] / 1e9:.2f} GB; export peak VmRSS "
             f"{numbers['export_peak_bytes'] / 1e9:.2f} GB = **{numbers['peak_over_checkpoint']:.2f}x**"
             f" (goal <= {PEAK_GOAL}), at: {peaks.phase_at.get('export', '?')}",
             f"- artifact (.pte + .ptd) {numbers['artifact_bytes'] / 1e9:.2f} GB = "
             f"**{numbers['artifact_over_bf16']:.3f}x** the bf16 model's "
             f"{numbers['bf16_bytes'] / 1e9:.2f} GB (goal <= {SIZE_GOAL})",
             f"- exit status {numbers['exit_status']} after {numbers['seconds']} s, load "
             f"{os.getloadavg()[0]:.1f}", "", "```json", json.dumps(numbers), "```", ""]
    with EVIDENCE.open("a") as f:
        f.write("\n".join(lines))
    print(f"added to {EVIDENCE}")


def main() -> None:
    from checkpoint_writers import write_gptq_shards

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--folder", default="/tmp/llm_checkpoint_export")
    ap.add_argument("--max-seq-len", type=int, default=16)
    ap.add_argument("--max-context-len", type=int, default=64)
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint and program")
    ap.add_argument("--write-only", action="store_true", help="write the checkpoint, keep it")
    ap.add_argument("--reuse", action="store_true",
                    help="export the checkpoint --write-only left in --folder")
    ap.add_argument("--quantize", choices=("int8_weight_only",),
                    help="pass --quantize: the checkpoint's float embedding and head in int8")
    ap.add_argument("--write", action="store_true",
                    help=f"add the run's numbers to {EVIDENCE.relative_to(ROOT)}")
    ap.add_argument("--no-run-check", action="store_true",
                    help="pass --no-run-check (the check's child maps the program again)")
    args = ap.parse_args()
    folder = Path(args.folder)
    checkpoint = folder / "checkpoint"
    index = checkpoint / "model.safetensors.index.json"
    if args.reuse:
        packed = json.loads(index.read_text())["metadata"]["total_size"]
        for old in (folder / "model.pte", folder / "model.ptd"):
            old.unlink(missing_ok=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)
        checkpoint.mkdir(parents=True)
        t0 = time.monotonic()
        print(f"writing a random int4 GPTQ checkpoint to {checkpoint}...", flush=True)
        config = {**LLAMA3_8B, "num_hidden_layers": args.layers}
        packed = write_gptq_shards(checkpoint, config, group=128)
        print(f"  {packed / 1e9:.2f} GB in {time.monotonic() - t0:.0f} s", flush=True)
        if args.write_only:
            return
    bf16 = weight_bytes(args.layers)
    pte = folder / "model.pte"
    cli = Path(sys.executable).with_name("executorch-tensorrt")
    cmd = [str(cli), "llm-export", "--model", str(checkpoint), "--max-seq-len",
           str(args.max_seq_len), "--max-context-len", str(args.max_context_len),
           "--dtype", "float16", "--external-weights", str(pte)]
    if args.no_run_check:
        cmd.insert(-1, "--no-run-check")
    if args.quantize:
        cmd[-1:-1] = ["--quantize", args.quantize]
    print(f"{args.layers} layers, checkpoint {packed / 1e9:.2f} GB, the bf16 model "
          f"{bf16 / 1e9:.2f} GB; load {os.getloadavg()[0]:.1f}\n$ {' '.join(cmd)}", flush=True)
    rc, peaks, check_lines, seconds = run_measured(cmd)
    report_peaks(rc, peaks, check_lines, seconds, packed, "checkpoint")
    artifact = sum(p.stat().st_size for p in (pte, pte.with_suffix(".ptd")) if p.exists())
    export_peak = peaks.by_process.get("export", {}).get("VmRSS", 0)
    numbers = {"layers": args.layers, "checkpoint_bytes": packed, "bf16_bytes": bf16,
               "export_peak_bytes": export_peak, "peak_over_checkpoint": export_peak / packed,
               "all_processes_peak_over_checkpoint": peaks.total / packed,
               "artifact_bytes": artifact, "artifact_over_bf16": artifact / bf16,
               "exit_status": rc, "seconds": round(seconds)}
    print(f"  artifact (.pte + .ptd) {artifact / 1e9:.2f} GB = {artifact / bf16:.3f}x the bf16 "
          f"model (goal <= {SIZE_GOAL}); export peak {export_peak / packed:.2f}x the checkpoint "
          f"(goal <= {PEAK_GOAL})")
    print(json.dumps(numbers), flush=True)
    if args.write:
        write_evidence(numbers, peaks, cmd)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
