"""optimum-executorch's non-LLM tasks: our `tensorrt` recipe vs optimum's
`xnnpack` recipe on the same model, in the same run.

For each task (fill-mask: BERT, image-classification: ViT,
text2text-generation: T5, each from a config with seeded random weights,
nothing downloaded) and each recipe, one child process saves the model,
times `main_export(..., recipe=...)`, loads the program with optimum's own
`ExecuTorchModelFor*` class, times its forward (generate for T5, a fixed
number of new tokens) and compares the outputs with eager transformers'.
Without a GPU our TensorRT partitions run through the onnxruntime fallback
(EXECUTORCH_TENSORRT_FALLBACK=onnxruntime). A recipe that fails for a task
is recorded with its error, not patched.

    .venv/bin/python tools/bench/optimum_tasks.py [--calls 20] [--write]

--write replaces docs/evidence/optimum-tasks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "optimum-site"
EVIDENCE = ROOT / "docs" / "evidence" / "optimum-tasks.md"
TASKS = ("fill-mask", "image-classification", "text2text-generation")
RECIPES = ("tensorrt", "xnnpack")
NEW_TOKENS = 16


def _model(task: str):
    import torch
    import transformers

    torch.manual_seed(0)
    if task == "fill-mask":
        config = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=512,
                                         max_position_embeddings=128)
        return transformers.BertForMaskedLM(config).eval(), "BERT 2x128"
    if task == "image-classification":
        config = transformers.ViTConfig(image_size=64, patch_size=8, hidden_size=128,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=512, num_labels=10)
        return transformers.ViTForImageClassification(config).eval(), "ViT 2x128, 64x64"
    config = transformers.T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=512,
                                   num_layers=2, num_heads=4, decoder_start_token_id=0,
                                   eos_token_id=1, pad_token_id=0, initializer_factor=8.0)
    return transformers.T5ForConditionalGeneration(config).eval(), "T5 2+2x128"


def error_line(e: Exception) -> str:
    """An export error in one line for the evidence table."""
    # torch's errors put the cause after their first line: keep the "got X(...)" part
    cause = re.search(r"got (\w+\(.*?\))", str(e))
    return (f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            + (f" ... {cause.group(1)[:300]}" if cause else ""))


def _median_seconds(call, calls: int) -> float:
    call()  # the first call loads engines / sessions
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def child(task: str, recipe: str, folder: str, calls: int) -> dict:
    import torch

    torch.set_num_threads(1)  # eager on one thread, as onnxruntime (EXECUTORCH_TENSORRT_ORT_THREADS)

    import executorch_tensorrt  # noqa: F401 - registers the backend and the recipe
    from optimum.executorch import (ExecuTorchModelForImageClassification,
                                    ExecuTorchModelForMaskedLM, ExecuTorchModelForSeq2SeqLM)
    from optimum.exporters.executorch import main_export

    model, name = _model(task)
    model.save_pretrained(f"{folder}/model")
    out = f"{folder}/{recipe}"
    kwargs = {"max_seq_len": 32} if task == "text2text-generation" else {}
    if recipe == "tensorrt":
        kwargs["recipe_kwargs"] = {"progress": None}
    row = {"task": task, "recipe": recipe, "model": name}
    t0 = time.perf_counter()
    try:
        main_export(f"{folder}/model", task=task, recipe=recipe, output_dir=out,
                    local_files_only=True, **kwargs)
    except Exception as e:  # noqa: BLE001 - recorded as the recipe's result
        row["error"] = error_line(e)
        return row
    row["export_s"] = time.perf_counter() - t0
    row["pte_kb"] = os.path.getsize(f"{out}/model.pte") / 1024
    with torch.no_grad():
        if task == "fill-mask":
            et = ExecuTorchModelForMaskedLM.from_pretrained(out)
            ids = torch.randint(0, 1000, (1, 64))
            mask = torch.ones_like(ids)
            got, want = et.forward(ids, mask), model(ids, attention_mask=mask).logits
            row["run_ms"] = 1e3 * _median_seconds(lambda: et.forward(ids, mask), calls)
            row["eager_ms"] = 1e3 * _median_seconds(lambda: model(ids, attention_mask=mask), calls)
            row["max_diff"] = float((got - want).abs().max())
        elif task == "image-classification":
            et = ExecuTorchModelForImageClassification.from_pretrained(out)
            pixels = torch.rand(1, 3, 64, 64)
            got, want = et.forward(pixels), model(pixel_values=pixels).logits
            row["run_ms"] = 1e3 * _median_seconds(lambda: et.forward(pixels), calls)
            row["eager_ms"] = 1e3 * _median_seconds(lambda: model(pixel_values=pixels), calls)
            row["max_diff"] = float((got - want).abs().max())
        else:
            et = ExecuTorchModelForSeq2SeqLM.from_pretrained(out)
            ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
            got = et.generate(ids, max_seq_len=NEW_TOKENS + 1)
            want = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                                  num_beams=1)[0].tolist()
            row["tokens_equal"] = got == want
            row["tokens"] = len(got) - 1
            row["run_ms"] = 1e3 * _median_seconds(
                lambda: et.generate(ids, max_seq_len=NEW_TOKENS + 1), max(3, calls // 4))
            row["eager_ms"] = 1e3 * _median_seconds(lambda: model.generate(
                ids, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1), max(3, calls // 4))
    return row


def run_child(script: Path, args: list[str], row: dict) -> dict:
    """`script --child *args FOLDER` in a fresh interpreter (optimum on the path,
    TensorRT partitions on the onnxruntime fallback, one thread) and the JSON
    row it prints last; `row` plus the error when it prints none."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), str(ROOT)]),
           "EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime", "EXECUTORCH_TENSORRT_ORT_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="optimum-bench-") as folder:
        done = subprocess.run([sys.executable, str(script), "--child", *args[:2], folder,
                               *args[2:]], capture_output=True, text=True, env=env)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {**row, "error": f"child failed: {done.stderr[-400:]}"}


def run_rows(script: Path, jobs: list[tuple[list[str], dict]],
             hidden: tuple[str, ...] = ()) -> list[dict]:
    """`run_child` for each (args, row) in order, each row printed as it comes
    (less the keys in `hidden`), so a long run shows its progress."""
    rows = []
    for args, row in jobs:
        rows.append(run_child(script, args, row))
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in hidden}), flush=True)
    return rows


def publish(text: str, evidence: Path, write: bool) -> int:
    """Prints the evidence text and, with `--write`, replaces `evidence` with it."""
    print(text)
    if write:
        evidence.write_text(text)
    return 0


def failure_lines(heading: str, errors: list[str]) -> list[str]:
    """The evidence file's list of rows that failed, under `heading`; none when
    nothing failed."""
    return ["", heading, "", *errors] if errors else []


XNNPACK_THREADS = ("Threads: onnxruntime and eager PyTorch one each; XNNPACK ExecuTorch's "
                   "default threadpool.")


def markdown_header(title: str, script: str, how: str,
                    threads: str = XNNPACK_THREADS) -> list[str]:
    """The evidence file's title and the paragraph on the machine and the setup."""
    load = os.getloadavg()
    return [
        title,
        "",
        f"Made by `{script} --write` on {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.1f} at the end "
        "(a shared machine, other jobs running: times are wall clock under that load). No "
        "GPU: the TensorRT partitions run through the onnxruntime fallback. " + how + " "
        + threads,
        "",
    ]


def _cell(row: dict, key: str, fmt: str) -> str:
    return fmt.format(row[key]) if key in row else "-"


def _markdown(rows: list[dict], calls: int) -> str:
    lines = markdown_header(
        "# optimum-executorch tasks: the `tensorrt` recipe vs `xnnpack`",
        "tools/bench/optimum_tasks.py",
        "Each program is loaded and run by optimum-executorch 1.1.0's own "
        f"`ExecuTorchModelFor*` class; run time is the median of {calls} forward calls (T5: "
        f"of whole `generate` calls of {NEW_TOKENS} new tokens), eager is transformers on the "
        "same inputs.")
    lines += [
        "| task | model | recipe | export s | .pte KiB | run ms | eager ms | vs eager |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    errors = []
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['task']} | {row.get('model', '')} | {row['recipe']} | "
                         "failed (below) | | | | |")
            errors.append(f"- {row['task']}, `{row['recipe']}`: `{row['error']}`")
            continue
        check = (f"tokens equal: {row['tokens_equal']} ({row['tokens']} tokens)"
                 if "tokens_equal" in row else f"max abs diff {row['max_diff']:.2e}")
        lines.append(f"| {row['task']} | {row['model']} | {row['recipe']} | "
                     f"{_cell(row, 'export_s', '{:.1f}')} | {_cell(row, 'pte_kb', '{:.0f}')} | "
                     f"{_cell(row, 'run_ms', '{:.2f}')} | {_cell(row, 'eager_ms', '{:.2f}')} | "
                     f"{check} |")
    lines += failure_lines("Recipes that failed (optimum's code, not patched here):", errors)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--write", action="store_true", help=f"replace {EVIDENCE.name}")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # task, recipe, folder
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.calls)))
        return 0
    rows = run_rows(Path(__file__), [([task, recipe, "--calls", str(args.calls)],
                                      {"task": task, "recipe": recipe})
                                     for task in args.tasks for recipe in RECIPES])
    return publish(_markdown(rows, args.calls), EVIDENCE, args.write)


if __name__ == "__main__":
    sys.exit(main())
