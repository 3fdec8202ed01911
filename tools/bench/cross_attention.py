"""Kept cross-attention keys/values vs recomputing them every decoder step:
decode milliseconds per token of Whisper on the onnxruntime fallback.

T5 recomputes its cross-attention keys/values: kept, they measured slower
(docs/evidence/cross-attention.md records that run).

For Whisper with tiny's dimensions (a config with seeded random weights,
nothing downloaded) and each variant, one child process exports the program and
times `text_decoder` calls through ExecuTorch's runtime:

- `kept` is the exported program as it is (llm/cross_attention.py): the
  projections run at position 0 only, inside an ONNX If;
- `kept-copied` is the same export with the kept buffers left a functional
  state (the form before they were written in place, aot/state/
  kept_write.py): each step copies them into the other of two buffers;
- `recomputed` is the same export with the step's cross-attention cache
  swapped for one that keeps nothing, so every step projects
  `encoder_hidden_states` again (what the program did before).

The first step (position 0) is reported apart; "ms/token" is the median of
the later steps. Both variants must produce the same greedy tokens.

    .venv/bin/python tools/bench/cross_attention.py [--steps 24] [--variants ...] [--write]

--write puts the run at the top of docs/evidence/cross-attention.md; the
earlier runs stay below it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from optimum_tasks import ROOT, failure_lines, markdown_header, publish, run_rows  # noqa: E402

EVIDENCE = ROOT / "docs" / "evidence" / "cross-attention.md"
MODELS = ("whisper",)
VARIANTS = ("recomputed", "kept-copied", "kept")


def _recompute_every_step() -> None:
    """Swaps the kept cross-attention cache for one that stores nothing."""
    from transformers.cache_utils import DynamicCache

    from executorch_tensorrt.llm import speech

    class Recomputed(DynamicCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return key_states, value_states

    def no_state(module, layers, *shape):
        module.cross_attention_layers = layers

    speech.add_cross_attention_state = no_state
    speech.cross_attention_cache = lambda module, cache_position: Recomputed()


def _copy_kept_every_step() -> None:
    """Leaves the kept buffers functional (two of each, copied every step)."""
    from executorch_tensorrt.aot.state import owned

    owned.find_kept_write = lambda program, placeholder: None


def _whisper(folder: str):
    import torch
    import transformers

    from executorch_tensorrt.llm.speech import export_whisper

    torch.manual_seed(0)
    config = transformers.WhisperConfig(  # tiny's dimensions, a small vocabulary
        vocab_size=1000, num_mel_bins=80, d_model=384, encoder_layers=4, decoder_layers=4,
        encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
        decoder_ffn_dim=1536, max_source_positions=1500, max_target_positions=448,
        decoder_start_token_id=998, bos_token_id=998, eos_token_id=999, pad_token_id=999)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    path = export_whisper(model, max_cache_len=64, output=f"{folder}/model.pte",
                          progress=None).path
    features = torch.randn(1, 80, 3000)
    return path, (features,), 998, "Whisper tiny dims (4+4 x 384, 1500 positions), vocab 1000"


def child(model: str, variant: str, folder: str, steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    import executorch_tensorrt  # noqa: F401 - registers the backend and the recipe
    from executorch.runtime import Runtime

    if variant == "recomputed":
        _recompute_every_step()
    elif variant == "kept-copied":
        _copy_kept_every_step()
    t0 = time.perf_counter()
    path, encoder_inputs, start, name = _whisper(folder)
    row = {"model": model, "variant": variant, "name": name,
           "export_s": time.perf_counter() - t0}
    program = Runtime.get().load_program(str(path))
    hidden = program.load_method("encoder").execute(list(encoder_inputs))[0]
    decoder = program.load_method("text_decoder")
    token, tokens, times = start, [], []
    for position in range(steps):
        ids, pos = torch.tensor([[token]]), torch.tensor([position])
        t = time.perf_counter()
        logits = decoder.execute([ids, hidden, pos])[0]
        times.append(time.perf_counter() - t)
        token = int(logits[0, -1].argmax())
        tokens.append(token)
    row.update(first_ms=1e3 * times[0], ms_per_token=1e3 * statistics.median(times[1:]),
               tokens=tokens)
    return row


def _markdown(rows: list[dict], steps: int) -> str:
    lines = markdown_header(
        "# Cross-attention keys/values: kept vs recomputed per decoder step",
        "tools/bench/cross_attention.py",
        "Each program is driven through ExecuTorch's runtime: the "
        f"encoder once, then {steps} `text_decoder` steps feeding back the greedy token. "
        "`first ms` is the step at position 0 (it projects in both variants); `ms/token` "
        "the median of the later steps. `kept` writes the kept keys/values in place (one "
        "buffer each, an empty update after position 0); `kept-copied` keeps them as a "
        "functional state (every step copies them into a second buffer); `recomputed` is "
        "the program before cross-attention state (every step projects the encoder output "
        "again).", threads="Threads: onnxruntime one.")
    lines += [
        "| model | variant | export s | first ms | ms/token | same tokens |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    by_model: dict[str, dict] = {}
    for row in rows:
        by_model.setdefault(row["model"], {})[row["variant"]] = row
    errors = []
    for model, variants in by_model.items():
        tokens = {v: r.get("tokens") for v, r in variants.items()}
        same = len({json.dumps(t) for t in tokens.values()}) == 1 and None not in tokens.values()
        for variant, row in variants.items():
            if "error" in row:
                lines.append(f"| {model} | {variant} | failed (below) | | | |")
                errors.append(f"- {model}, {variant}: `{row['error'][-400:]}`")
                continue
            lines.append(f"| {row['name']} | {variant} | {row['export_s']:.1f} | "
                         f"{row['first_ms']:.2f} | {row['ms_per_token']:.2f} | {same} |")
    lines += failure_lines("Failures:", errors)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--write", action="store_true",
                        help=f"put the run at the top of {EVIDENCE.name}")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # model, variant, folder
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.steps)))
        return 0
    rows = run_rows(Path(__file__), [([model, variant, "--steps", str(args.steps)],
                                      {"model": model, "variant": variant})
                                     for model in args.models for variant in args.variants],
                    hidden=("tokens",))
    return publish(_with_earlier_runs(_markdown(rows, args.steps)), EVIDENCE, args.write)


EARLIER = "## Earlier runs"


def _with_earlier_runs(text: str) -> str:
    """`text` followed by the evidence file's earlier runs (its body below the
    title), so a new run never drops what an older program measured."""
    if not EVIDENCE.exists():
        return text
    old = EVIDENCE.read_text().split("\n", 1)[-1].replace(f"{EARLIER}\n", "").strip()
    return f"{text}\n{EARLIER}\n\n{old}\n"


if __name__ == "__main__":
    sys.exit(main())
