"""optimum-executorch's generative multimodal tasks: our `tensorrt` recipe vs
optimum's `xnnpack` recipe on the same tiny random-weight models, in one run.

Cells: vision-language families through `image-text-to-text` (LLaVA, SmolVLM,
Gemma3: the configs of tests/llm/test_multimodal_vlm.py and
tools/bench/vlm_families.py), Whisper through `automatic-speech-recognition`
and Voxtral (audio-language) through `multimodal-text-to-text`. Each cell is
one child process (as tools/bench/optimum_tasks.py): it saves the model,
times `main_export(..., recipe=...)`, loads the program with optimum's own
`ExecuTorchModelFor*` class, generates greedily with it and compares the
tokens with eager transformers' greedy tokens. Decode ms/token is the median
of the one-token `forward` calls of that class's own generate loop (3 loops;
the prefill / encoder call excluded). Our TensorRT partitions run through the
onnxruntime fallback (no GPU here).

Our recipe takes optimum's modules as they are. optimum 1.1.0's xnnpack path
needs adjustments to optimum's own modules to run these models against the
transformers installed here; they are applied in the xnnpack child only, each
named in ADJUSTMENTS and written into the evidence file.

    .venv/bin/python tools/bench/optimum_multimodal.py [--cells llava whisper] [--write]

--write replaces docs/evidence/optimum-multimodal.md.
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
from optimum_tasks import ROOT, RECIPES, error_line, markdown_header, run_child  # noqa: E402

EVIDENCE = ROOT / "docs" / "evidence" / "optimum-multimodal.md"
VISION = ("llava", "idefics3", "smolvlm", "gemma3")
CELLS = (*VISION, "whisper", "voxtral")
CONTEXT = 64      # optimum's max_length / max_seq_len: the cache
NEW = 24          # tokens generated per loop (fewer where EOS comes first)
LOOPS = 3         # generate loops timed
N_MELS = 8

ADJUSTMENTS = {
    "example-inputs": (
        "VisionExportableModule / AudioExportableModule.prepare_export_inputs build their "
        "example input with the model's processor from an image / audio URL (a download); "
        "the adjusted one returns a random input of the shape the processor gives "
        "(pixels [1, 3, 32, 32], Idefics3/SmolVLM [1, 1, 3, 32, 32]; Voxtral log-mel "
        "[2, 8, 32] with optimum's own dynamic batch)"),
    "encoder-output": (
        "VisionExportableModule.forward / AudioExportableModule.forward return "
        "`get_image_features(...)` / `get_audio_features(...)`, which transformers 5 returns "
        "as an output object; the adjusted forwards return its `pooler_output` (the "
        "projected features merged into the prompt), as [1, N, D]"),
    "hooks-run-once": (
        "transformers' output-capture hooks (`can_return_tuple` / `check_model_inputs`) do "
        "not trace under torch.export's strict mode until the module has run once: the "
        "encoder wrapper runs once eagerly on the example input before export"),
    "whisper-static-cache": (
        "Seq2SeqLMDecoderExportableModuleWithStaticCache builds transformers' StaticCache "
        "with `max_batch_size=` and sizes it from `num_hidden_layers` (Whisper's encoder "
        "layer count); the adjusted wrapper builds the self-attention StaticCache as "
        "transformers now takes it (`config, max_cache_len`) for the decoder's layers, and "
        "registers each layer's `cumulative_length` (which the cache's update mutates) as a "
        "buffer beside its keys and values; transformers' StaticLayer now writes at that "
        "running length, not at `cache_position`, so the adjusted forward sets it to "
        "`cache_position` (self-attention) and 0 (cross-attention, whose keys and values "
        "the traced graph recomputes from the encoder output on every call) first"),
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


# --- optimum's xnnpack path, adjusted (ADJUSTMENTS) -----------------------------------------

def _adjust_optimum(name: str) -> list[str]:
    import torch
    from optimum.exporters.executorch import integrations

    applied = []
    if name in VISION:
        nested = name in ("idefics3", "smolvlm")
        vision = integrations.VisionExportableModule

        def vision_inputs(self):
            pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
            pixels = (pixels[None] if nested else pixels).to(self.model.dtype)
            with torch.no_grad():
                self(pixels)  # hooks-run-once
            return pixels, None

        def vision_forward(self, input_features):
            features = self.model.get_image_features(input_features)
            features = getattr(features, "pooler_output", features)
            if isinstance(features, (list, tuple)):
                features = torch.cat(list(features), dim=0)
            return features.reshape(1, -1, features.shape[-1])

        vision.prepare_export_inputs, vision.forward = vision_inputs, vision_forward
        applied += ["example-inputs", "encoder-output", "hooks-run-once"]
    elif name == "voxtral":
        audio = integrations.AudioExportableModule
        frames = 2 * _voxtral_frames_half()

        def audio_inputs(self):
            features = torch.randn(2, N_MELS, frames, generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                self(features.to(self.model.dtype))  # hooks-run-once
            dims = {"input_features": {0: torch.export.Dim("enc_batch_size_dim", min=1,
                                                            max=10)}}
            return features.to(self.model.dtype), dims

        def audio_forward(self, input_features):
            features = self.model.get_audio_features(input_features)
            return getattr(features, "pooler_output", features).unsqueeze(0)

        audio.prepare_export_inputs, audio.forward = audio_inputs, audio_forward
        applied += ["example-inputs", "encoder-output", "hooks-run-once"]
    elif name == "whisper":
        _adjust_whisper_decoder(integrations)
        applied.append("whisper-static-cache")
    return applied


def _voxtral_frames_half() -> int:
    from tests.llm.test_audio_llm import FRAMES
    return FRAMES // 2


def _adjust_whisper_decoder(integrations) -> None:
    import copy

    from transformers import EncoderDecoderCache, StaticCache

    wrapper = integrations.Seq2SeqLMDecoderExportableModuleWithStaticCache

    def init(self, model, max_static_cache_length, batch_size):
        import torch
        torch.nn.Module.__init__(self)
        self.decoder = model.get_decoder()
        self.proj_out = model.proj_out
        config = copy.deepcopy(model.config)
        config.num_hidden_layers = config.decoder_layers
        self.config = model.config
        heads = config.decoder_attention_heads
        self.self_attention_cache = StaticCache(config=config,
                                                max_cache_len=max_static_cache_length)
        self.self_attention_cache.early_initialization(
            batch_size, heads, config.d_model // heads, model.dtype, model.device)
        self.cross_attention_cache = StaticCache(config=config,
                                                 max_cache_len=config.max_source_positions)
        self.cross_attention_cache.early_initialization(
            batch_size, heads, config.d_model // heads, model.dtype, model.device)
        for kind, cache in (("self", self.self_attention_cache),
                            ("cross", self.cross_attention_cache)):
            for i, layer in enumerate(cache.layers):
                self.register_buffer(f"{kind}_attention_key_cache_{i}", layer.keys,
                                     persistent=False)
                self.register_buffer(f"{kind}_attention_value_cache_{i}", layer.values,
                                     persistent=False)
                self.register_buffer(f"{kind}_attention_length_{i}", layer.cumulative_length,
                                     persistent=False)
        self.cache = EncoderDecoderCache(self.self_attention_cache, self.cross_attention_cache)

    forward = wrapper.forward

    def positioned_forward(self, decoder_input_ids, encoder_hidden_states, cache_position):
        # The cache writes at its own running length: start it at this call's position
        # (self-attention) and at 0 (cross-attention, recomputed from the encoder output).
        for layer in self.self_attention_cache.layers:
            layer.cumulative_length.copy_(cache_position[0])
        for layer in self.cross_attention_cache.layers:
            layer.cumulative_length.zero_()
        self.cache.is_updated = dict.fromkeys(self.cache.is_updated, False)
        return forward(self, decoder_input_ids, encoder_hidden_states, cache_position)

    wrapper.__init__, wrapper.forward = init, positioned_forward


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
        row["adjustments"] = _adjust_optimum(name)
    out = str(folder / recipe)
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        main_export(str(folder / "model"), output_dir=out, local_files_only=True,
                    recipe=recipe, **_export_kwargs(name, recipe))
        row["export_s"] = time.perf_counter() - t0
        row["export_cpu_s"] = time.process_time() - cpu0
        row["pte_kb"] = os.path.getsize(f"{out}/model.pte") / 1024
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
        "| model | recipe | export s (CPU s) | .pte KiB | decode ms/token | tokens equal | "
        "adjustments to optimum |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    errors = []
    for row in rows:
        adjusted = ", ".join(row.get("adjustments", [])) or "none"
        if "error" in row:
            lines.append(f"| {row['model']} | {row['recipe']} | failed (below) | | | | "
                         f"{adjusted} |")
            errors.append(f"- {row['model']}, `{row['recipe']}`: `{row['error']}`")
            continue
        lines.append(f"| {row['model']} | {row['recipe']} | "
                     f"{row['export_s']:.1f} ({row['export_cpu_s']:.1f}) | "
                     f"{row['pte_kb']:.0f} | {row['decode_ms']:.3f} | "
                     f"{row['tokens_equal']} ({row['tokens']} tokens) | {adjusted} |")
    lines += ["", "Ratios (tensorrt / xnnpack; goals: decode <= 1.0x, export <= 1.5x):", ""]
    by = {(r["cell"], r["recipe"]): r for r in rows}
    for cell in dict.fromkeys(r["cell"] for r in rows):
        ours, theirs = by.get((cell, "tensorrt"), {}), by.get((cell, "xnnpack"), {})
        if "decode_ms" in ours and "decode_ms" in theirs:
            lines.append(f"- {ours['model']}: decode {ours['decode_ms'] / theirs['decode_ms']:.2f}x, "
                         f"export {ours['export_s'] / theirs['export_s']:.2f}x wall, "
                         f"{ours['export_cpu_s'] / theirs['export_cpu_s']:.2f}x CPU")
    if errors:
        lines += ["", "Cells that failed:", "", *errors]
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
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # cell, recipe, folder
    args = parser.parse_args()
    if args.child:
        sys.path[:0] = [str(ROOT / "tests" / "llm")]
        print("\n" + json.dumps(child(*args.child)))
        return 0
    rows = []
    for cell in args.cells:
        for recipe in args.recipes:
            rows.append(run_child(Path(__file__), [cell, recipe], {"cell": cell, "recipe": recipe,
                                                                    "model": _describe(cell)}))
            print(json.dumps(rows[-1]), flush=True)
    text = _markdown(rows)
    print(text)
    if args.write:
        EVIDENCE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
