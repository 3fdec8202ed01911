"""Artifact size of `llm.export` per quantization scheme, one run: the same
tiny random Llama (the runner tests' WIDE config: 2 layers, hidden 256,
intermediate 512, vocabulary 96, untied head; 1.23M parameters) exported
fp32, int8_weight_only and int4_weight_only (group 128), weights in the .pte;
prints each .pte's bytes and its ratio to the fp32 .pte of the same run.

    .venv/bin/python tools/bench/llm_size.py

Not a test: export takes a few minutes on 2 shared cores.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "llm"))
from runner_helpers import CONFIGS  # noqa: E402

from executorch_tensorrt import llm  # noqa: E402

WIDE = {**CONFIGS["llama"], "hidden_size": 256, "intermediate_size": 512}


def main() -> None:
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scheme in (None, "int8_weight_only", "int4_weight_only"):
            out = Path(tmp) / f"{scheme or 'fp32'}.pte"
            llm.export(WIDE, max_seq_len=4, max_context_len=48, quantize=scheme, output=out,
                       progress=None)
            sizes[scheme or "fp32"] = out.stat().st_size
    print("| scheme | .pte bytes | / fp32 |\n|---|---|---|")
    for name, size in sizes.items():
        print(f"| {name} | {size:,} | {size / sizes['fp32']:.3f} |")


if __name__ == "__main__":
    main()
