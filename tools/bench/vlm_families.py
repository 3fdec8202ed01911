"""Which vision-language families run through ExecuTorch's own
MultimodalRunner after `executorch_tensorrt.llm.export_multimodal`, and what
each export costs: the tiny random configs of tests/llm/test_multimodal_vlm.py
(plus Gemma3 and SmolVLM), each exported, run with MultimodalRunner (text,
image, text; greedy) and compared with transformers' greedy `generate` on the
same image and prompt (Gemma3's without `token_type_ids`: docs/multimodal.md).

    EXECUTORCH_TENSORRT_FALLBACK=onnxruntime .venv/bin/python \\
        tools/bench/vlm_families.py [--only llava,gemma3] [--quantize int8_weight_only] [--dtype float16]

Prints one line per family: pass / tokens differ / the first line of the
error, with the export's wall and CPU seconds (the CPU seconds are this
process's, all threads: comparable across loads of a shared machine).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "llm"))
sys.path.insert(0, str(ROOT))

from tests.llm.test_multimodal_vlm import (  # noqa: E402
    _TEXT, _VISION, BOI, EOI, FAMILIES, IMAGE, IMAGE_TOKENS, MAX_CONTEXT, MAX_SEQ, NEW, SPECIAL,
    _eager_tokens, _image, _runner, _runner_tokens)
from runner_helpers import write_char_tokenizer  # noqa: E402

MORE = {
    "smolvlm": ({**FAMILIES["idefics3"], "model_type": "smolvlm"}, 4),
    "gemma3": ({"model_type": "gemma3", "image_token_id": IMAGE, "mm_tokens_per_image": 4,
                "boi_token_index": BOI, "eoi_token_index": EOI,
                "text_config": {"model_type": "gemma3_text", **_TEXT, "head_dim": 8,
                                "sliding_window": 16},
                "vision_config": {"model_type": "siglip_vision_model", **_VISION}}, 4),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated family names")
    parser.add_argument("--quantize", default=None)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    from executorch_tensorrt import llm

    configs = {**{n: (c, IMAGE_TOKENS[n]) for n, c in FAMILIES.items()}, **MORE}
    FAMILIES.update({n: c for n, (c, _) in MORE.items()})
    IMAGE_TOKENS.update({n: t for n, (_, t) in MORE.items()})
    names = args.only.split(",") if args.only else list(configs)
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = write_char_tokenizer(Path(folder), SPECIAL)
        for name in names:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                result = llm.export_multimodal(
                    configs[name][0], output=Path(folder) / f"{name}.pte", max_seq_len=MAX_SEQ,
                    max_context_len=MAX_CONTEXT, quantize=args.quantize, dtype=args.dtype,
                    progress=None)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                got = _runner_tokens(_runner(result.path, None, tokenizer), _image(1))
                # Reduced precision or quantized: the run check compared each method;
                # tokens are compared in float32 only.
                exact = args.quantize is None and args.dtype == "float32"
                want = _eager_tokens(name, _image(1)) if exact else got
                parts = {m: len(r.partitions) for m, r in result.export.reports.items()}
                verdict = "pass" if got == want[:len(got)] else f"tokens differ {got} {want}"
                print(f"{name}: {verdict}; export {wall:.1f} s wall, {cpu:.1f} s CPU; "
                      f"partitions {parts}; image -> {result.image.tokens} embeddings",
                      flush=True)
            except Exception as e:  # noqa: BLE001 - one line per family
                traceback.print_exc()
                print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                      flush=True)


if __name__ == "__main__":
    main()
