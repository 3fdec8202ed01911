#!/usr/bin/env python3
"""Fuzzes the quantized-checkpoint readers (quantization/checkpoints/) with mutated files.

Seeds are written here from tiny configs (tests/quantization/
checkpoint_writers.py): GPTQ with act-order, AWQ gemm and gemv, compressed-tensors
pack-quantized with zero points and with act-order groups (safetensors +
config.json), and GGUF (llama with Q4_0, Q4_1, Q8_0 Linears and a Q8_0 embedding;
llama with Q4_K, Q5_K, Q6_K Linears, read with unsupported="refuse" or
"requantize" at random; qwen3, phi3 and gemma3 with Q4_0, Q4_1, Q8_0). Each
case mutates one region of one seed (the safetensors header, config.json, the
GGUF header/metadata/tensor table, the tensor data, or the whole file: byte
edits, interesting integers, truncation, insertion, deletion), reads it with `read_checkpoint`, and
classifies what happened:

    accepted   it read (a mutation of data bytes often only changes values)
    refused    CheckpointError, the readers' named error
    crash      any other exception
    hang       not finished within --case-time seconds of CPU (or ten times that
               of wall-clock time)

The readers are pure Python, so cases run in this process (timers catch hangs;
CPU time, so that a loaded machine does not turn slow cases into hangs). CI runs a few hundred cases (tests/quantization/test_checkpoint_fuzz.py);
the longer run:

    python tools/fuzz/checkpoint_fuzz.py --out fuzz-ckpt --cases 20000 --time 1800

writes fuzz-ckpt/summary.json and fuzz-ckpt/repro/ (the files that crashed or hung).
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "quantization"))

FORMATS = ("gptq", "awq", "awq-gemv", "compressed-tensors", "compressed-tensors-g", "gguf",
           "gguf-k", "gguf-qwen3", "gguf-phi3", "gguf-gemma3")
INTERESTING = [0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 33, 255, 256, 0x7FFF, 0xFFFF, 2**31 - 1,
               2**31, 2**32 - 1, 2**32, 2**48, 2**63 - 1, 2**64 - 1]
JSON_BYTES = b'{}[]",:-0123456789.eE \x00\xff'


class Hang(Exception):
    pass


def write_seeds(folder: Path) -> dict[str, Path]:
    """One small checkpoint per format; returns format -> path (folder or .gguf file)."""
    from gguf import GGMLQuantizationType as K

    from checkpoint_writers import write_awq, write_compressed_tensors, write_gguf, write_gptq

    seeds = {"gptq": folder / "gptq", "awq": folder / "awq", "awq-gemv": folder / "awq-gemv",
             "compressed-tensors": folder / "ct", "compressed-tensors-g": folder / "ct-g",
             "gguf": folder / "small.gguf", "gguf-k": folder / "k.gguf",
             "gguf-qwen3": folder / "qwen3.gguf", "gguf-phi3": folder / "phi3.gguf",
             "gguf-gemma3": folder / "gemma3.gguf"}
    write_gptq(seeds["gptq"], "llama-small", act_order=True)
    write_awq(seeds["awq"], "llama-small")
    write_awq(seeds["awq-gemv"], "llama-small", version="gemv")
    write_compressed_tensors(seeds["compressed-tensors"], "llama-small", symmetric=False)
    write_compressed_tensors(seeds["compressed-tensors-g"], "llama-small", act_order=True)
    write_gguf(seeds["gguf-qwen3"], "qwen3-small", {"default": K.Q4_0, "attn_k": K.Q4_1,
                                                   "ffn_down": K.Q8_0})
    write_gguf(seeds["gguf-phi3"], "phi3-small", {"default": K.Q4_0, "ffn_up": K.Q4_1})
    write_gguf(seeds["gguf-gemma3"], "gemma3-small", {"default": K.Q4_0, "attn_v": K.Q8_0})
    write_gguf(seeds["gguf"], "llama-small", {"default": K.Q4_0, "attn_k": K.Q4_1,
                                             "ffn_down": K.Q8_0}, embed_kind=K.Q8_0)
    write_gguf(seeds["gguf-k"], "llama-k", {"default": K.Q4_K, "attn_q": K.Q5_K,
                                           "ffn_down": K.Q6_K})
    return seeds


def regions(fmt: str, seed: Path) -> list[tuple[str, str, int, int]]:
    """(file name, region, start, end) of the seed's parts."""
    if fmt.startswith("gguf"):
        from executorch_tensorrt.quantization.checkpoints.gguf_file import GGUFFile

        f = GGUFFile(seed)
        start = min(t.start for t in f.tensors.values())
        f.close()
        size = seed.stat().st_size
        return [(seed.name, "gguf_header", 0, start), (seed.name, "data", start, size),
                (seed.name, "file", 0, size)]
    st = seed / "model.safetensors"
    n = struct.unpack("<Q", st.read_bytes()[:8])[0]
    size, cfg = st.stat().st_size, (seed / "config.json").stat().st_size
    return [("model.safetensors", "st_header", 0, 8 + n), ("model.safetensors", "data", 8 + n,
                                                          size),
            ("model.safetensors", "file", 0, size), ("config.json", "config", 0, cfg)]


def mutate(data: bytes, start: int, end: int, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    end = max(end, start + 1)
    at = rng.randrange(start, min(end, len(b)) if len(b) > start else start + 1)
    op = rng.choice(["flip", "byte", "int32", "int64", "truncate", "insert", "delete", "json"])
    if op == "flip" and at < len(b):
        b[at] ^= 1 << rng.randrange(8)
    elif op == "byte" and at < len(b):
        b[at] = rng.randrange(256)
    elif op in ("int32", "int64"):
        width = 4 if op == "int32" else 8
        value = rng.choice(INTERESTING) % (2 ** (8 * width))
        b[at:at + width] = value.to_bytes(width, "little")
    elif op == "truncate":
        del b[at:]
    elif op == "insert":
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 8, 17])))
    elif op == "delete":
        del b[at:at + rng.choice([1, 4, 8, 17])]
    elif op == "json" and at < len(b):
        b[at] = rng.choice(JSON_BYTES)
    return bytes(b), f"{op}@{at}"


def run_case(path: Path, case_time: float, unsupported: str) -> tuple[str, str]:
    from executorch_tensorrt.errors import CheckpointError
    from executorch_tensorrt.quantization.checkpoints import read_checkpoint

    def alarm(*_):
        raise Hang()

    old = signal.signal(signal.SIGALRM, alarm), signal.signal(signal.SIGPROF, alarm)
    signal.setitimer(signal.ITIMER_PROF, case_time)
    signal.setitimer(signal.ITIMER_REAL, case_time * 10)
    try:
        read_checkpoint(path, unsupported=unsupported)
        return "accepted", ""
    except CheckpointError as e:
        return "refused", str(e)[:200]
    except Hang:
        return "hang", ""
    except Exception as e:  # noqa: BLE001 - anything else is a finding
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return "crash", f"{type(e).__name__}: {str(e)[:200]} at {frame.filename}:{frame.lineno}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])


def fuzz(cases: int, seed: int = 0, time_limit: float = 1e9, case_time: float = 5.0,
         out: Path | None = None) -> dict:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU time of one case is then its own
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="ckpt-fuzz-"))
    try:
        seeds = write_seeds(work / "seeds")
        plans = {fmt: regions(fmt, seeds[fmt]) for fmt in FORMATS}
        counts: dict[str, Counter] = {fmt: Counter() for fmt in FORMATS}
        findings, started, done = [], time.monotonic(), 0
        for i in range(cases):
            if time.monotonic() - started > time_limit:
                break
            fmt = FORMATS[i % len(FORMATS)]
            name, region, start, end = rng.choice(plans[fmt])
            case_dir = work / "case"
            shutil.rmtree(case_dir, ignore_errors=True)
            if fmt.startswith("gguf"):
                case_dir.mkdir()
                target = case_dir / seeds[fmt].name
                original = seeds[fmt].read_bytes()
            else:
                shutil.copytree(seeds[fmt], case_dir)
                target = case_dir
                original = (seeds[fmt] / name).read_bytes()
            mutated, what = mutate(original, start, end, rng)
            (case_dir / name).write_bytes(mutated)
            outcome, detail = run_case(target, case_time, rng.choice(["refuse", "requantize"]))
            counts[fmt][outcome] += 1
            done += 1
            if outcome in ("crash", "hang"):
                findings.append({"case": i, "format": fmt, "region": region, "mutation": what,
                                 "outcome": outcome, "detail": detail})
                if out is not None:
                    repro = out / "repro" / f"case{i}-{fmt}"
                    shutil.copytree(case_dir, repro)
        summary = {"cases": done, "seconds": round(time.monotonic() - started, 2),
                   "by_format": {f: dict(c) for f, c in counts.items()}, "findings": findings}
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
    finally:
        shutil.rmtree(work, ignore_errors=True)
        torch.set_num_threads(threads)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("fuzz-ckpt"))
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--time", type=float, default=600.0, help="stop after this many seconds")
    p.add_argument("--case-time", type=float, default=5.0, help="a case longer is a hang")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    summary = fuzz(a.cases, a.seed, a.time, a.case_time, a.out)
    print(json.dumps({k: v for k, v in summary.items() if k != "findings"}, indent=2))
    for f in summary["findings"][:20]:
        print(f)
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
