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
  init) and `engine_at_load` for a GPU of the target, for the prepared
  program (a cache entry: read, checked, SHA-256) and for the full-engine
  program (the blob's own engine), alternating in one child process, median
  of --repeats each, wall time and the thread's CPU time (on a shared machine
  the CPU time leaves out the time other jobs hold the core). A load happens
  once per process, so a few repeats in a fresh process are the realistic
  case, not a warmed loop. The ratio is the goal's "load <= 2x a program with
  a full engine", for the part that runs here.

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


def child_lookup(prepared: str, cache: str, full: str, target: str, repeats: int) -> dict:
    os.environ["EXECUTORCH_TENSORRT_CACHE_DIR"] = cache
    from executorch_tensorrt.blob import read_blob
    from executorch_tensorrt.deploy.prepare import program_named_data
    from executorch_tensorrt.program.info import read_pte
    from executorch_tensorrt.runtime.named_data import blob_weights
    from executorch_tensorrt.runtime.tensorrt.portability import engine_at_load
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    def program(pte: str):
        ptd = Path(pte).with_suffix(".ptd")
        pte_file = read_pte(pte)
        named = program_named_data(pte_file, ptd if ptd.exists() else None)
        return named, [bytes(pte_file.program.backend_delegate_data[d.processed.index].data)
                       for plan in pte_file.program.execution_plan for d in plan.delegates
                       if d.id == "TensorRTBackend"]

    trt = load_tensorrt()
    sides = {"prepared": program(prepared), "full": program(full)}
    wall: dict = {k: [] for k in sides}
    cpu: dict = {k: [] for k in sides}
    sources: dict = {k: set() for k in sides}
    for _ in range(repeats):
        for side, (named, blobs) in sides.items():  # alternating
            start, start_cpu = time.perf_counter(), time.thread_time()
            for data in blobs:
                blob = read_blob(data)
                loaded = engine_at_load(blob, trt, target, lambda: blob_weights(blob, named))
                sources[side].add(loaded.source)
            cpu[side].append(time.thread_time() - start_cpu)
            wall[side].append(time.perf_counter() - start)
    return {side: {"wall": statistics.median(wall[side]), "cpu": statistics.median(cpu[side]),
                   "sources": sorted(sources[side])} for side in sides}


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
                  else child_lookup(*rest[:4], int(rest[4])))
        print(json.dumps(result))
        return 0
    print("| model | partitions | build at prepare (s, per partition) | prepare wall (s) | "
          "lookup, prepared (ms) | lookup, full engine (ms) | ratio | ratio, CPU time | "
          "full engine's build at export (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            folder = Path(tmp) / name
            folder.mkdir()
            none, full = export_pair(name, folder, args.target)
            cache = str(folder / "cache")
            prep = in_child("prepare", str(none), cache, args.target)
            again = in_child("prepare", str(none), cache, args.target)
            assert all(s == "cache" for s, _ in again["partitions"]), again
            both = in_child("lookup", str(none), cache, str(full), args.target,
                            str(args.repeats))
            got, ref = both["prepared"], both["full"]
            assert got["sources"] == ["cache"] and ref["sources"] == ["blob"], both
            from executorch_tensorrt.deploy.prepare import first_load

            export_build = [p.build_seconds for p in first_load(full, cache=cache,
                                                                capability=args.target)]
            builds = ", ".join(f"{b:.2f}" for _, b in prep["partitions"])
            print(f"| {name} | {len(prep['partitions'])} | {builds} | {prep['wall']:.2f} | "
                  f"{got['wall'] * 1e3:.2f} | {ref['wall'] * 1e3:.2f} | "
                  f"{got['wall'] / ref['wall']:.2f} | {got['cpu'] / ref['cpu']:.2f} | "
                  f"{', '.join(f'{b:.2f}' for b in export_build if b is not None)} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
