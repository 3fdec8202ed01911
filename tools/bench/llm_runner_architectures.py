"""Which architectures run through ExecuTorch's own LLM runner after
`executorch_tensorrt.llm.export`: tiny random configs of Llama, Qwen2/3,
Mistral, Phi3, Gemma2/3 (sliding window) and GPT-2, each exported, run with
`TextLLMRunner.generate` (greedy) and compared with eager greedy on the same
prompt (the 6-architecture run of docs/llm.md; CI runs Llama and Qwen2 in
tests/llm/test_runner_llm_export.py).

    EXECUTORCH_TENSORRT_FALLBACK=onnxruntime .venv/bin/python \\
        tools/bench/llm_runner_architectures.py [--only llama,gpt2] [--dtype float16]

Prints one line per architecture: pass / tokens differ / the first line of
the error. Several minutes on a 2-core machine (one export each).
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

from runner_helpers import CONFIGS, EOS, encode, runner_tokens, write_char_tokenizer  # noqa: E402

PROMPT, NEW, MAX_SEQ, MAX_CONTEXT = "Hello,TensorRT!", 12, 4, 48


def _one(name: str, folder: Path, tokenizer: Path, dtype: str) -> str:
    from executorch.extension.llm.runner import TextLLMRunner

    from executorch_tensorrt.llm.exporter import causal_lm, eager_decoder, export
    from executorch_tensorrt.llm.greedy_decode import greedy_decode

    model = causal_lm(CONFIGS[name])
    result = export(model, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT, dtype=dtype,
                    output=folder / f"{name}.pte", progress=None)
    backends = " ".join(result.export.backends["forward"])
    got = runner_tokens(TextLLMRunner(str(result.path), str(tokenizer)), PROMPT, NEW)
    want = greedy_decode(eager_decoder(model, MAX_CONTEXT), encode(PROMPT), NEW).tokens
    want = want[:want.index(EOS) + 1] if EOS in want else want
    same = got == want[:len(got)] and len(got) >= min(len(want), NEW - 1)
    return (f"{'pass' if same else 'tokens differ'} (delegates: {backends}; runner {got}"
            + ("" if same else f", eager {want}") + ")")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated names (default: all): "
                                       + ", ".join(CONFIGS))
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")  # no GPU here
    names = args.only.split(",") if args.only else list(CONFIGS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tokenizer = write_char_tokenizer(folder)
        for name in names:
            t0 = time.perf_counter()
            try:
                line = _one(name, folder, tokenizer, args.dtype)
            except Exception as e:  # noqa: BLE001 - report and go on to the next
                if os.environ.get("EXECUTORCH_TENSORRT_DEBUG"):
                    traceback.print_exc()
                line = f"FAILS: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            print(f"{name}: {line} [{time.perf_counter() - t0:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
