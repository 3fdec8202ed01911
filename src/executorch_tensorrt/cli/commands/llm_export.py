"""`executorch-tensorrt llm-export`: the command form of
`executorch_tensorrt.llm.export` (a transformers causal LM -> a .pte that
ExecuTorch's LLM runner runs; docs/llm.md).

The model comes from a config (random weights: a config.json, or the JSON
text itself) or from a local transformers model folder; nothing is
downloaded.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..exits import EXIT_EXPORT, EXIT_OK, EXIT_USAGE, Fail
from .common import add_command, add_quantize_options


def register(sub) -> None:
    p = add_command(
        sub, "llm-export",
        help="export a transformers causal LM for ExecuTorch's LLM runner (docs/llm.md)",
        description="Writes OUTPUT (.pte, + .ptd with --external-weights) with the method "
                    "forward(tokens[1, S], positions[S]) -> logits, its KV cache owned by "
                    "TensorRT, and the constant methods ExecuTorch's TextLLMRunner reads.")
    p.add_argument("output", help="the .pte to write")
    p.add_argument("--config", metavar="JSON",
                   help="a transformers config.json (or its JSON text): random weights")
    p.add_argument("--model", metavar="DIR", help="a local transformers model folder")
    p.add_argument("--max-seq-len", type=int, required=True,
                   help="most tokens per call (longer prompts go in chunks)")
    p.add_argument("--max-context-len", type=int,
                   help="the KV cache's positions: prompt plus generated tokens (with "
                        "--memory-budget: the most to choose)")
    p.add_argument("--memory-budget", metavar="SIZE",
                   help="GPU memory the program may take (8GB, 7.5GiB, 512MiB): the largest "
                        "--max-context-len that fits is chosen, or the export is refused "
                        "with each part's size (docs/llm.md, Memory)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    p.add_argument("--batch-size", type=int, default=1,
                   help="rows of the static KV cache (ExecuTorch's runner takes 1)")
    add_quantize_options(p)
    p.add_argument("--external-weights", action="store_true",
                   help="store the weights in OUTPUT's .ptd beside it")
    p.add_argument("--seed", type=int, default=0, help="random weights' seed (--config)")
    p.set_defaults(func=run)


def _model(args):
    if (args.config is None) == (args.model is None):
        raise Fail(EXIT_USAGE, "give either --config (a config.json or its JSON text; random "
                                "weights) or --model (a local transformers model folder)")
    if args.model is not None:
        if not Path(args.model).is_dir():
            raise Fail(EXIT_USAGE, f"--model {args.model}: not a folder (a local "
                                    "transformers model; nothing is downloaded)")
        from transformers import AutoModelForCausalLM

        from ...llm.exporter import DTYPES

        # Loaded in the export's dtype: a checkpoint stored in it is mapped,
        # not copied (nor converted after a float32 load).
        return AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True,
                                                    dtype=DTYPES.get(args.dtype))
    text = args.config
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise Fail(EXIT_USAGE, f"--config {text}: no such file (give a config.json or "
                                    "the JSON text)")
        text = path.read_text()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise Fail(EXIT_USAGE, f"--config: not JSON ({e})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise Fail(EXIT_USAGE, "--config: a JSON object with a 'model_type' (e.g. "
                                '{"model_type": "llama", ...}) is needed')
    from ...llm.exporter import DTYPES, causal_lm

    return causal_lm(config, seed=args.seed, dtype=DTYPES[args.dtype])


def run(args) -> int:
    out = Path(args.output)
    if out.suffix != ".pte":
        raise Fail(EXIT_USAGE, f"the output {out} should end in .pte")
    if args.max_context_len is None and args.memory_budget is None:
        raise Fail(EXIT_USAGE, "give --max-context-len, or --memory-budget to choose the "
                                "largest context that fits")
    from ...llm.memory_budget import MemoryBudgetError, parse_size

    if args.memory_budget is not None:
        try:
            parse_size(args.memory_budget)
        except ValueError as e:
            raise Fail(EXIT_USAGE, f"--memory-budget: {e}") from None
    model = _model(args)
    from ...llm.exporter import export
    from ...program.memory_report import format_memory_report

    try:
        result = export(model, max_seq_len=args.max_seq_len,
                        max_context_len=args.max_context_len, dtype=args.dtype,
                        memory_budget=args.memory_budget,
                        quantize=args.quantize, group_size=args.group_size,
                        batch_size=args.batch_size, external_weights=args.external_weights,
                        output=out)
    except ValueError as e:
        raise Fail(EXIT_USAGE, str(e)) from None
    except MemoryBudgetError as e:
        raise Fail(EXIT_EXPORT, f"--memory-budget {args.memory_budget}: {e}") from None
    except Exception as e:  # noqa: BLE001 - torch.export and lowering raise many kinds
        if os.environ.get("EXECUTORCH_TENSORRT_DEBUG"):
            raise
        raise Fail(EXIT_EXPORT, f"export failed: {type(e).__name__}: {e}") from None
    methods = ", ".join(f"{k}={v}" for k, v in result.metadata.constant_methods().items())
    print(f"wrote {result.path}" + "".join(f" + {p}" for p in result.data_paths))
    print(f"runner metadata: {methods}", file=sys.stderr)
    if result.memory is not None:
        print(format_memory_report(result.memory))
    return EXIT_OK
