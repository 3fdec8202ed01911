"""Engines before the first call, measured on the CPU (TensorRT-RTX builds
here; nothing executes an engine): per model, the engine build that `prepare`
does ahead of time (what a first load would pay without it), and the load-time
engine lookup of the prepared program against the same program exported with
a full engine.

    .venv/bin/python tools/bench/prepare.py [--models add,cnn,...,hf_resnet18]
        [--target SM89] [--repeats 7]

Per model, in this process: export twice, without a GPU, as users would: the
default (engine none, weights in a .ptd) and --inline-weights for the target
(a full engine built at export). Then each measured step runs in its own child
process (no in-process build cache can help it):
- prepare: `executorch_tensorrt.prepare` into a fresh cache, wall time and
  the build time each cache entry records;
- lookup: what the executor does at load before TensorRT deserializes the
  engine: read_blob of the delegate's bytes (as ExecuTorch hands them to
  init) and `engine_at_load` for a GPU of the target, median of --repeats,
  for the prepared program (a cache entry: read, checked, SHA-256) and for
  the full-engine program (the blob's own engine). The ratio is the goal's
  "load <= 2x a program with a full engine", for the part that runs here.

Deserializing the engine and the first call need a GPU of the target: not
measured here (docs/gpu-runtime.md says so).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("add", "cnn", "transformer", "bitwise", "erfinv", "hf_resnet18", "hf_bert_mini")


def real_model(name: str):
    """Real architectures from transformers configs (random weights)."""
    import torch
    import transformers

    if name == "hf_resnet18":  # ResNet-18's stages and widths, 11.2M parameters
        cfg = transformers.ResNetConfig(depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512],
                                        layer_type="basic", embedding_size=64)
        return transformers.ResNetModel(cfg).eval(), (torch.randn(1, 3, 224, 224),)
    if name == "hf_bert_mini":  # BERT-mini: 4 layers, 256 wide, 11.2M parameters
        cfg = transformers.BertConfig(hidden_size=256, num_hidden_layers=4,
                                      num_attention_heads=4, intermediate_size=1024)
        return (transformers.BertModel(cfg).eval(),
                (torch.randint(0, cfg.vocab_size, (1, 128), dtype=torch.int64),))
    raise ValueError(name)


def export_pair(name: str, folder: Path, target: str) -> tuple[Path, Path]:
    import executorch_tensorrt
    from executorch_tensorrt.examples.models import example

    model, inputs = real_model(name) if name.startswith("hf_") else example(name)
    none = executorch_tensorrt.export(model, inputs, folder / f"{name}.pte", progress=None,
                                      external_weights=True)
    full = executorch_tensorrt.export(model, inputs, folder / f"{name}_full.pte", progress=None,
                                      inline_weights=True, compute_capabilities=(target,))
    return Path(none), Path(full)


def child_prepare(pte: str, cache: str, target: str) -> dict:
    import executorch_tensorrt

    ptd = Path(pte).with_suffix(".ptd")
    start = time.perf_counter()
    done = executorch_tensorrt.prepare(pte, ptd if ptd.exists() else None, cache=cache,
                                       capability=target, progress=None)
    return {"wall": time.perf_counter() - start,
            "partitions": [[p.source, p.build_seconds] for p in done]}


def child_lookup(pte: str, cache: str, target: str, repeats: int) -> dict:
    os.environ["EXECUTORCH_TENSORRT_CACHE_DIR"] = cache
    from executorch_tensorrt.blob import read_blob
    from executorch_tensorrt.deploy.prepare import program_named_data
    from executorch_tensorrt.program.info import read_pte
    from executorch_tensorrt.runtime.named_data import blob_weights
    from executorch_tensorrt.runtime.tensorrt.portability import engine_at_load
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    ptd = Path(pte).with_suffix(".ptd")
    pte_file = read_pte(pte)
    named = program_named_data(pte_file, ptd if ptd.exists() else None)
    program = pte_file.program
    blobs = [bytes(program.backend_delegate_data[d.processed.index].data)
             for plan in program.execution_plan for d in plan.delegates
             if d.id == "TensorRTBackend"]
    trt = load_tensorrt()
    times, sources = [], set()
    for _ in range(repeats):
        start = time.perf_counter()
        for data in blobs:
            blob = read_blob(data)
            loaded = engine_at_load(blob, trt, target, lambda: blob_weights(blob, named))
            sources.add(loaded.source)
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "sources": sorted(sources),
            "engine_bytes": len(loaded.engine)}


def in_child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--target", default="SM89")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--child", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        result = (child_prepare(*rest) if kind == "prepare"
                  else child_lookup(rest[0], rest[1], rest[2], int(rest[3])))
        print(json.dumps(result))
        return 0
    print("| model | partitions | build at prepare (s, per partition) | prepare wall (s) | "
          "lookup, prepared (ms) | lookup, full engine (ms) | ratio | full engine's build "
          "at export (s) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            folder = Path(tmp) / name
            folder.mkdir()
            none, full = export_pair(name, folder, args.target)
            cache = str(folder / "cache")
            prep = in_child("prepare", str(none), cache, args.target)
            again = in_child("prepare", str(none), cache, args.target)
            assert all(s == "cache" for s, _ in again["partitions"]), again
            got = in_child("lookup", str(none), cache, args.target, str(args.repeats))
            ref = in_child("lookup", str(full), str(folder / "unused"), args.target,
                           str(args.repeats))
            assert got["sources"] == ["cache"] and ref["sources"] == ["blob"], (got, ref)
            from executorch_tensorrt.deploy.prepare import first_load

            export_build = [p.build_seconds for p in first_load(full, cache=cache,
                                                                capability=args.target)]
            builds = ", ".join(f"{b:.2f}" for _, b in prep["partitions"])
            print(f"| {name} | {len(prep['partitions'])} | {builds} | {prep['wall']:.2f} | "
                  f"{got['median'] * 1e3:.2f} | {ref['median'] * 1e3:.2f} | "
                  f"{got['median'] / ref['median']:.2f} | "
                  f"{', '.join(f'{b:.2f}' for b in export_build if b is not None)} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
