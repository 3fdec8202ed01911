"""Prefill and decode as separate TensorRT optimization profiles (decode
first: S = 1, then S = 2..max_seq_len) against one profile over S = 1..max_seq_len,
for an `llm.export` program: engine bytes, build seconds and the builder's
activation memory per profile; writes docs/evidence/llm-profiles.md.

    nice -n 10 .venv/bin/python tools/bench/llm_profiles.py [--no-write]

Each program is exported with `inline_weights=True`, so its blob carries the
engine built here (TensorRT-RTX's CPU builder, every default capability)
and that build's measured time. No engine is executed (no GPU here); the run
check is off. Not a test.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

CONFIG = {"model_type": "llama", "vocab_size": 8192, "hidden_size": 512,
          "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8,
          "num_key_value_heads": 4, "max_position_embeddings": 1024, "tie_word_embeddings": False}
MAX_SEQ, MAX_CONTEXT, DTYPE = 64, 512, "float16"
VARIANTS = {
    "one profile, S 1..64": None,
    "decode S=1, then prefill S 2..64": [{"seq": (1, 1, 1)}, {"seq": (2, MAX_SEQ, MAX_SEQ)}],
}


def measure(profiles, folder: Path) -> dict:
    from executorch_tensorrt import llm
    from executorch_tensorrt.program.info import read_program

    out = folder / "llm.pte"
    llm.export(CONFIG, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT, dtype=DTYPE,
               output=out, progress=None, run_check=False, inline_weights=True,
               profiles=profiles)
    blobs = [d for m in read_program(out) for d in m.delegates if d.meta is not None]
    return {"engine_bytes": sum(d.engine_size for d in blobs),
            "build_seconds": sum(d.meta.build.build_seconds or 0 for d in blobs),
            "activation": [list(d.meta.build.activation_bytes or ()) for d in blobs],
            "partitions": len(blobs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import tensorrt_rtx

    rows = []
    for name, profiles in VARIANTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            r = measure(profiles, Path(tmp))
        print(name, r, flush=True)
        act = "; ".join(", ".join(f"{n / 2**20:.2f} MiB" for n in a) for a in r["activation"])
        rows.append(f"| {name} | {r['partitions']} | {r['engine_bytes'] / 1e6:.2f} MB | "
                    f"{r['build_seconds']:.1f} s | {act} |")
    params = "4 layers, hidden 512, vocab 8192"
    text = "\n".join([
        f"# LLM optimization profiles: one shared vs decode + prefill ({datetime.date.today()})",
        "", f"`tools/bench/llm_profiles.py`: `llm.export` of a random-weight Llama ({params}), "
        f"{DTYPE}, max_seq_len {MAX_SEQ}, max_context_len {MAX_CONTEXT}, inline weights; "
        f"TensorRT-RTX {tensorrt_rtx.__version__} CPU builder, every default capability. "
        "Build seconds are the engine build alone, on a shared 2-core machine.", "",
        "| profiles | partitions | engine | build | activation per profile |",
        "| --- | --- | --- | --- | --- |", *rows]) + "\n"
    print(text)
    if not args.no_write:
        out = Path(__file__).resolve().parents[2] / "docs/evidence/llm-profiles.md"
        out.write_text(text)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
