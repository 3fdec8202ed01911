"""Per-token decode time and bytes at the delegate boundary: our delegate (the
onnxruntime fallback: no GPU runs TensorRT engines here) vs XNNPACK, same
models, same flow, one run.

    .venv/bin/python tools/bench/llm.py [--tokens 32] [--repeat 5] [--threads 1]
                                        [--json out.json]

Models: the hand-written CachedDecoder and transformers' tiny Llama
(TorchExportableModuleForDecoderOnlyLM, static cache), both with random
weights and one method with a dynamic sequence length. Each is lowered with
TensorRTPartitioner and with XnnpackPartitioner; both programs load in this
process and decode alternately (8-token prompt, then `--tokens` tokens, greedy),
median over `--repeat` runs of the per-token mean, and of the steady-state
per-token median (every decode call after the first, which changes the
sequence length: the adapter rebinds its values). Bytes per token: what
crosses the delegate boundary in a decode call (the user arguments; our
executor counts the bytes it copies over a whole run, per generated token:
neither the cache nor, once bound after the first call of each shape, the
logits), and the
operators ExecuTorch runs outside the delegates (a `copy_` there is a
full-cache copy per call). Threads: both peers get the same budget,
`--threads N` (default 1): onnxruntime's intra-op threads
(EXECUTORCH_TENSORRT_ORT_THREADS) and ExecuTorch's threadpool, which XNNPACK
runs on; `--threads 0` leaves both at their defaults (one thread per core).
Not a test: timing on a shared machine.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")

import torch  # noqa: E402

PROMPT = list(range(3, 11))


def lower(ep, backend: str):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    if backend == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        partitioner = XnnpackPartitioner()
    else:
        from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
        partitioner = TensorRTPartitioner(progress=None)
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner],
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch()


def models():
    from executorch_tensorrt.examples import llm as lm
    from executorch_tensorrt.llm.hf_export import export_hf

    torch.manual_seed(0)
    decoder = lm.CachedDecoder().eval().requires_grad_(False)
    yield "CachedDecoder (2 layers, dim 32, cache 48)", decoder, \
        lambda: lm.export_cached_decoder(copy.deepcopy(decoder)), decoder.head.out_features
    wrapper = lm.hf_tiny_llama()
    wrapper.requires_grad_(False)
    yield "transformers tiny Llama (2 layers, dim 32, cache 48)", wrapper, \
        lambda: export_hf(copy.deepcopy(wrapper)), 128


def outside_ops(program) -> list[str]:
    return [op.name for op in program.executorch_program.execution_plan[0].operators]


def cache_bytes(module) -> int:
    return sum(b.numel() * b.element_size() for name, b in module.named_buffers()
               if "cache" in name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for both peers (0: each library's default)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.threads > 0:  # before any session or delegate exists
        os.environ["EXECUTORCH_TENSORRT_ORT_THREADS"] = str(args.threads)
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        _unsafe_reset_threadpool(args.threads)

    import executorch_tensorrt
    from executorch.runtime import Runtime

    from executorch_tensorrt.runtime import callbacks
    from executorch_tensorrt.runtime import state as rt_state
    from executorch_tensorrt.llm.greedy_decode import greedy_decode

    rows = []
    for name, module, export, vocab in models():
        methods, ops, keep = {}, {}, []
        before = set(map(id, rt_state.live_states("forward")))
        for backend in ("tensorrt", "xnnpack"):
            program = lower(export(), backend)
            ops[backend] = outside_ops(program)
            # A Method does not keep its Program (nor the bytes it reads) alive: keep both.
            loaded = Runtime.get().load_program(program.buffer)
            keep.append((program, loaded))
            methods[backend] = loaded.load_method("forward")
        [state] = [s for s in rt_state.live_states("forward") if id(s) not in before]
        [executor] = [e for e in callbacks.install().live_executors()
                      if getattr(e, "state", None) is state]
        times: dict[str, list[float]] = {b: [] for b in methods}
        steady: dict[str, list[float]] = {b: [] for b in methods}
        first: dict[str, list[float]] = {b: [] for b in methods}
        tokens = {}
        copied = []
        for _ in range(args.repeat):
            for backend, method in methods.items():
                executorch_tensorrt.reset_state()
                before = executor.copied_bytes
                g = greedy_decode(method, PROMPT, args.tokens, keep_logits=False)
                if backend == "tensorrt":  # the whole run's, prompt included: the first
                    # call of each shape copies its logits, later ones write the bound output
                    copied.append((executor.copied_bytes - before) / args.tokens)
                times[backend].append(g.seconds_per_token)
                # The first decode call changes S (prompt -> 1): the adapter makes
                # new OrtValues for the new shapes; the rest is steady state.
                first[backend].append(g.decode_seconds[0])
                steady[backend].append(statistics.median(g.decode_seconds[1:]))
                tokens[backend] = g.tokens
        arg_bytes = 2 * 8 + vocab * 4  # token id + position in, [1, 1, V] fp32 logits out
        row = {"model": name, "threads": args.threads or "default",
               "tokens_equal": tokens["tensorrt"] == tokens["xnnpack"],
               "ours_ms_per_token": 1e3 * statistics.median(times["tensorrt"]),
               "xnnpack_ms_per_token": 1e3 * statistics.median(times["xnnpack"]),
               "ours_steady_ms_per_token": 1e3 * statistics.median(steady["tensorrt"]),
               "xnnpack_steady_ms_per_token": 1e3 * statistics.median(steady["xnnpack"]),
               "ours_first_decode_ms": 1e3 * statistics.median(first["tensorrt"]),
               "xnnpack_first_decode_ms": 1e3 * statistics.median(first["xnnpack"]),
               "ours_boundary_bytes_per_token": arg_bytes,
               "ours_bytes_copied_per_token": statistics.median(copied),  # median run
               "cache_bytes": cache_bytes(module),
               "ours_ops_outside": ops["tensorrt"], "xnnpack_ops_outside": ops["xnnpack"]}
        row["ratio"] = row["ours_ms_per_token"] / row["xnnpack_ms_per_token"]
        row["steady_ratio"] = row["ours_steady_ms_per_token"] / row["xnnpack_steady_ms_per_token"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| model | ours (fallback) ms/token: mean / steady | XNNPACK ms/token: mean / "
          "steady | ratio: mean / steady | first decode call ms: ours / XNNPACK | bytes at our "
          "boundary per token | bytes copied per token (ours; never the cache) | ops outside "
          "delegates: ours / XNNPACK |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['ours_ms_per_token']:.3f} / {r['ours_steady_ms_per_token']:.3f} "
              f"| {r['xnnpack_ms_per_token']:.3f} / {r['xnnpack_steady_ms_per_token']:.3f} "
              f"| {r['ratio']:.2f} / {r['steady_ratio']:.2f} "
              f"| {r['ours_first_decode_ms']:.3f} / {r['xnnpack_first_decode_ms']:.3f} "
              f"| {r['ours_boundary_bytes_per_token']} | "
              f"{r['ours_bytes_copied_per_token']:g} | {r['ours_ops_outside'] or '[]'} / "
              f"{sorted(set(r['xnnpack_ops_outside']))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
