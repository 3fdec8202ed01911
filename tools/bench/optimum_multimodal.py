"""optimum-executorch's generative multimodal tasks: our `tensorrt` recipe vs
optimum's `xnnpack` recipe on the same tiny random-weight models, in one run.

Cells: vision-language families through `image-text-to-text` (LLaVA, Idefics3,
SmolVLM, Gemma3: the configs of tests/llm/test_multimodal_vlm.py and
tools/bench/vlm_families.py), Whisper through `automatic-speech-recognition`
and Voxtral (audio-language) through `multimodal-text-to-text`. Each cell is
one child process (as tools/bench/optimum_tasks.py): it saves the model,
times `main_export(..., recipe=...)`, loads the program with optimum's own
`ExecuTorchModelFor*` class, generates greedily with it and compares the
tokens with eager transformers' greedy tokens. Decode ms/token is the median
of the one-token `forward` calls of that class's own generate loop (3 loops;
the prefill / encoder call excluded), beside what one token executes (delegate
and kernel calls of the decode methods, read from the program). Our TensorRT partitions run through the
onnxruntime fallback (no GPU here).

Our recipe takes optimum's modules as they are. optimum 1.1.0's xnnpack path
needs adjustments to optimum's own modules to run these models against the
transformers installed here (optimum_adjustments.py); they are applied in the
xnnpack child only, each named and explained in the evidence file.

    .venv/bin/python tools/bench/optimum_multimodal.py [--cells llava whisper] [--write]

--write replaces docs/evidence/optimum-multimodal.md; --rows LOG renders the rows an
earlier run printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from optimum_adjustments import ADJUSTMENTS, adjust_optimum  # noqa: E402
from optimum_tasks import (ROOT, RECIPES, error_line, failure_lines, markdown_header,  # noqa: E402
                           publish, run_rows)

EVIDENCE = ROOT / "docs" / "evidence" / "optimum-multimodal.md"
VISION = ("llava", "idefics3", "smolvlm", "gemma3")
CELLS = (*VISION, "whisper", "voxtral")
CONTEXT = 64      # optimum's max_length / max_seq_len: the cache
NEW = 24          # tokens generated per loop (fewer where EOS comes first)
LOOPS = 3         # generate loops timed
N_MELS = 8

#: Why a cell fails where the cause is known (written under the failures).
FAILURE_CAUSES = {
    "smolvlm": "optimum's image-text-to-text loader builds the model with "
               "AutoModelForPreTraining, which has no SmolVLM class in this transformers: "
               "neither recipe gets a module (Idefics3, the same architecture, stands in)",
    "idefics3": "optimum's VisionExportableModule calls get_image_features, whose filter of "
                "all-zero padding images has a data-dependent shape that torch.export "
                "cannot trace; our recipe's ImageEncoder calls the vision model and "
                "connector on the one image (vision_families.py)",
}


# --- the models ---------------------------------------------------------------------------

def _vision_config(name: str) -> tuple[dict, int]:
    from vlm_families import MORE
    from tests.llm.test_multimodal_vlm import FAMILIES, IMAGE_TOKENS

    configs = {**{n: (c, IMAGE_TOKENS[n]) for n, c in FAMILIES.items()}, **MORE}
    return configs[name]


def _whisper_config():
    from tests.llm.test_optimum_whisper import _config
    return _config()


def _save(name: str, folder: Path):
    """The seeded model, saved with a locally built tokenizer / processor."""
    import torch
    import transformers

    from executorch_tensorrt import llm
    from runner_helpers import write_char_tokenizer

    model_dir = folder / "model"
    if name in VISION:
        from tests.llm.test_multimodal_vlm import SPECIAL
        model = llm.vision_language_model(_vision_config(name)[0])
        model.save_pretrained(model_dir)
        return model, write_char_tokenizer(folder, SPECIAL)
    tokenizer_file = write_char_tokenizer(folder)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    if name == "whisper":
        model = transformers.WhisperForConditionalGeneration(_whisper_config()).eval()
        model.save_pretrained(model_dir)
        transformers.WhisperProcessor(
            feature_extractor=transformers.WhisperFeatureExtractor(feature_size=N_MELS,
                                                                   chunk_length=1),
            tokenizer=tokenizer).save_pretrained(model_dir)
        return model, tokenizer_file
    from tests.llm.test_audio_llm import _voxtral
    model = _voxtral()
    model.save_pretrained(model_dir)
    return model, tokenizer_file


def _adjust(name: str) -> list[str]:
    if name in VISION:
        return adjust_optimum("vision", nested_images=name in ("idefics3", "smolvlm"))
    if name == "voxtral":
        from tests.llm.test_audio_llm import FRAMES
        return adjust_optimum("audio", n_mels=N_MELS, frames=FRAMES)
    return adjust_optimum("whisper")


# --- one cell -----------------------------------------------------------------------------

class _DecodeTimer:
    """Wraps the loaded class's `forward`: the seconds of each call that
    decodes one token (not the prefill / encoder call)."""

    def __init__(self, et, first_call: bool):
        self.seconds: list[float] = []
        self._forward, self._skip_first = et.forward, first_call
        self._calls = 0
        et.forward = self

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self._forward(*args, **kwargs)
        if self._calls or not self._skip_first:
            self.seconds.append(time.perf_counter() - t0)
        self._calls += 1
        return out

    def new_loop(self) -> None:
        self._calls = 0


def _generate_vision(name: str, model, out: str, tokenizer_file: Path, recipe: str):
    import torch
    from optimum.executorch import ExecuTorchModelForMultiModalToText
    from transformers import PreTrainedTokenizerFast

    from runner_helpers import encode
    from tests.llm.test_multimodal_vlm import AFTER, BEFORE, IMAGE, _image

    config, image_tokens = _vision_config(name)
    et = ExecuTorchModelForMultiModalToText.from_pretrained(out)
    et.tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))  # it prints
    ids = torch.tensor([encode(BEFORE) + [IMAGE] * image_tokens + encode(AFTER)])
    pixels = _image(1)[None]
    if recipe == "xnnpack" and name in ("idefics3", "smolvlm"):
        pixels = pixels[None]  # optimum's encoder takes the processor's [1, images, C, H, W]
    timer = _DecodeTimer(et, first_call=True)
    runs = []
    for _ in range(LOOPS):
        timer.new_loop()
        runs.append(et.generate(ids, echo=True, max_seq_len=ids.shape[1] + NEW,
                                multimodal_features=pixels))
    want = _eager_vision(name, model, ids, len(runs[0]))
    return runs, want, timer.seconds


def _eager_vision(name: str, model, ids, n: int) -> list[int]:
    import torch

    from tests.llm.test_multimodal_vlm import _image

    pixels = _image(1)[None]
    if name in ("idefics3", "smolvlm"):
        pixels = pixels[None]
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(input_ids=ids, pixel_values=pixels,
                             attention_mask=torch.ones_like(ids), max_new_tokens=n,
                             do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def _generate_whisper(model, out: str):
    import torch
    from optimum.executorch import ExecuTorchModelForSpeechSeq2Seq

    from tests.llm.test_optimum_whisper import _eager_greedy

    et = ExecuTorchModelForSpeechSeq2Seq.from_pretrained(out)
    torch.manual_seed(1)
    features = torch.randn(1, N_MELS, 100)
    timer = _DecodeTimer(et, first_call=True)
    runs = []
    for _ in range(LOOPS):
        timer.new_loop()
        runs.append(et.generate(features, max_seq_len=NEW + 1))
    return runs, _eager_greedy(model, features, NEW), timer.seconds


def _generate_voxtral(model, out: str, tokenizer_file: Path):
    import torch
    from optimum.executorch import ExecuTorchModelForMultiModalToText
    from transformers import PreTrainedTokenizerFast

    from tests.llm.test_audio_llm import FRAMES, _eager_greedy

    et = ExecuTorchModelForMultiModalToText.from_pretrained(out)
    et.tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
    torch.manual_seed(1)
    features = torch.randn(1, N_MELS, FRAMES)
    audio_tokens = int(model.get_audio_features(features).pooler_output.shape[0])
    prompt = [5, 6, 7]
    ids = torch.tensor([[model.config.audio_token_id] * audio_tokens + prompt])
    timer = _DecodeTimer(et, first_call=True)
    runs = []
    for _ in range(LOOPS):
        timer.new_loop()
        runs.append(et.generate(ids, echo=True, max_seq_len=ids.shape[1] + NEW,
                                multimodal_features=features))
    return runs, _eager_greedy(model, features, prompt, len(runs[0])), timer.seconds


def _decode_step_calls(pte: str, methods: tuple[str, ...]) -> dict:
    """What one decoded token executes in the program: delegate calls and
    ExecuTorch kernel calls (portable ops outside any delegate) of `methods`."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    with open(pte, "rb") as f:
        program = deserialize_pte_binary(f.read())
    program = getattr(program, "program", program)
    counts = {"delegate_calls": 0, "kernel_calls": 0}
    for plan in program.execution_plan:
        if plan.name in methods:
            for chain in plan.chains:
                for instruction in chain.instructions:
                    kind = type(instruction.instr_args).__name__
                    if kind == "DelegateCall":
                        counts["delegate_calls"] += 1
                    elif kind == "KernelCall":
                        counts["kernel_calls"] += 1
    return counts


def _export_kwargs(name: str, recipe: str) -> dict:
    task = {"whisper": "automatic-speech-recognition",
            "voxtral": "multimodal-text-to-text"}.get(name, "image-text-to-text")
    kwargs = {"task": task}
    if name == "whisper":
        kwargs["max_seq_len"] = NEW + 1  # the decoder cache
    else:
        kwargs["max_length"] = CONTEXT
    if recipe == "tensorrt":
        kwargs["recipe_kwargs"] = {"progress": None}
    return kwargs


def child(name: str, recipe: str, folder: str) -> dict:
    import torch

    torch.set_num_threads(1)  # eager on one thread, as onnxruntime (EXECUTORCH_TENSORRT_ORT_THREADS)

    import executorch_tensorrt  # noqa: F401 - registers the backend and the recipe
    from optimum.exporters.executorch import main_export

    folder = Path(folder)
    model, tokenizer_file = _save(name, folder)
    row = {"cell": name, "recipe": recipe, "model": _describe(name)}
    if recipe == "xnnpack":
        row["adjustments"] = _adjust(name)
    out = str(folder / recipe)
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        main_export(str(folder / "model"), output_dir=out, local_files_only=True,
                    recipe=recipe, **_export_kwargs(name, recipe))
        row["export_s"] = time.perf_counter() - t0
        row["export_cpu_s"] = time.process_time() - cpu0
        row["pte_kb"] = os.path.getsize(f"{out}/model.pte") / 1024
        row.update(_decode_step_calls(f"{out}/model.pte", ("text_decoder",) if name == "whisper"
                                      else ("token_embedding", "text_decoder")))
        with torch.no_grad():
            if name in VISION:
                runs, want, seconds = _generate_vision(name, model, out, tokenizer_file, recipe)
            elif name == "whisper":
                runs, want, seconds = _generate_whisper(model, out)
            else:
                runs, want, seconds = _generate_voxtral(model, out, tokenizer_file)
    except Exception as e:  # noqa: BLE001 - recorded as the recipe's result
        row["error"] = error_line(e)
        return row
    got = runs[0]
    row["tokens"] = len(got)
    # optimum's classes stop after their EOS id: the tokens before it are eager's.
    row["tokens_equal"] = bool(got) and got == want[:len(got)] and all(r == got for r in runs)
    row["decode_ms"] = 1e3 * statistics.median(seconds)
    row["decode_calls"] = len(seconds)
    return row


def _describe(name: str) -> str:
    return {"llava": "LLaVA (CLIP + Llama) 2x32",
            "idefics3": "Idefics3 (SigLIP-style + Llama) 2x32", "smolvlm": "SmolVLM (SigLIP + Llama) 2x32",
            "gemma3": "Gemma3 (SigLIP + Gemma3) 2x32", "whisper": "Whisper 2+2x32",
            "voxtral": "Voxtral (Whisper enc + Llama) 2+2x32"}[name]


# --- the report ---------------------------------------------------------------------------

def _calls(row: dict) -> str:
    if "delegate_calls" not in row:
        return "-"
    return f"{row['delegate_calls']} + {row['kernel_calls']}"


def _markdown(rows: list[dict]) -> str:
    lines = markdown_header(
        "# optimum-executorch multimodal tasks: the `tensorrt` recipe vs `xnnpack`",
        "tools/bench/optimum_multimodal.py",
        f"Each program is loaded and run by optimum-executorch 1.1.0's own class "
        f"(`ExecuTorchModelForMultiModalToText`, `ExecuTorchModelForSpeechSeq2Seq`), {LOOPS} "
        f"greedy generate loops of up to {NEW} tokens; decode ms/token is the median of that "
        "class's one-token `forward` calls (token embedding + text decoder; Whisper: decoder), "
        "the prefill / encoder call left out. Export CPU seconds are the child's (all its "
        "threads): comparable across loads of a shared machine. `tokens equal`: the class's "
        "tokens are eager "
        "transformers' greedy tokens (up to the class's stop at EOS) in every loop.")
    lines += [
        "| model | recipe | export s (CPU s) | .pte KiB | decode ms/token | calls per token "
        "(delegate + kernel) | tokens equal | adjustments to optimum |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    errors = []
    for row in rows:
        adjusted = ", ".join(row.get("adjustments", [])) or "none"
        if "error" in row:
            lines.append(f"| {row['model']} | {row['recipe']} | failed (below) | | | | | "
                         f"{adjusted} |")
            errors.append(f"- {row['model']}, `{row['recipe']}`: `{row['error']}`")
            continue
        lines.append(f"| {row['model']} | {row['recipe']} | "
                     f"{row['export_s']:.1f} ({row['export_cpu_s']:.1f}) | "
                     f"{row['pte_kb']:.0f} | {row['decode_ms']:.3f} | {_calls(row)} | "
                     f"{row['tokens_equal']} ({row['tokens']} tokens) | {adjusted} |")
    lines += ["", "Ratios (tensorrt / xnnpack; goals: decode <= 1.0x, export <= 1.5x):", ""]
    by = {(r["cell"], r["recipe"]): r for r in rows}
    for cell in dict.fromkeys(r["cell"] for r in rows):
        ours, theirs = by.get((cell, "tensorrt"), {}), by.get((cell, "xnnpack"), {})
        if "decode_ms" in ours and "decode_ms" in theirs:
            lines.append(f"- {ours['model']}: decode {ours['decode_ms'] / theirs['decode_ms']:.2f}x, "
                         f"export {ours['export_s'] / theirs['export_s']:.2f}x wall, "
                         f"{ours['export_cpu_s'] / theirs['export_cpu_s']:.2f}x CPU")
    lines += failure_lines("Cells that failed:", errors)
    if errors:
        failed = dict.fromkeys(r["cell"] for r in rows if "error" in r)
        lines += [f"- why {cell}: {FAILURE_CAUSES[cell]}" for cell in failed
                  if cell in FAILURE_CAUSES]
    used = dict.fromkeys(a for r in rows for a in r.get("adjustments", []))
    if used:
        lines += ["", "Adjustments applied to optimum's modules in the xnnpack child only "
                  "(our recipe takes optimum's modules as they are):", ""]
        lines += [f"- `{a}`: {ADJUSTMENTS[a]}" for a in used]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=list(CELLS), choices=CELLS)
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    parser.add_argument("--write", action="store_true", help=f"replace {EVIDENCE.name}")
    parser.add_argument("--rows", type=Path,
                        help="render the rows an earlier run printed (its output) instead")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # cell, recipe, folder
    args = parser.parse_args()
    if args.child:
        sys.path[:0] = [str(ROOT / "tests" / "llm")]
        print("\n" + json.dumps(child(*args.child)))
        return 0
    if args.rows:
        rows = [json.loads(line) for line in args.rows.read_text().splitlines()
                if line.startswith('{"cell"')]
    else:
        rows = run_rows(Path(__file__), [([cell, recipe], {"cell": cell, "recipe": recipe,
                                                           "model": _describe(cell)})
                                         for cell in args.cells for recipe in args.recipes])
    return publish(_markdown(rows), EVIDENCE, args.write)


if __name__ == "__main__":
    sys.exit(main())
