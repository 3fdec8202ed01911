#!/usr/bin/env python3
"""Fuzzes .pte programs with TensorRT delegates through the real executorch.runtime.

Each case mutates one region of a program (the blob's header fields, its JSON
metadata, engine or ONNX section, ExecuTorch's flatbuffer and extended header,
or the whole file; with --ptd the FH01 header, flatbuffer index and weight
segments of the .ptd beside it; byte edits, interesting integers, truncation,
insertion),
then loads and runs it with `executorch.runtime` (TensorRT partitions through
the onnxruntime fallback), and classifies what happened:

    clean_error   loading or running raised an error
    same_output   it ran and gave the reference output
    wrong_output  it ran and gave another output
    crash         the process died of a signal
    hang          it did not finish within the time limit

Every case runs in a fresh child forked from this process, which imported
everything first (a fork server: thousands of cases take minutes on 2 cores).
Children write Python stacks with faulthandler; for a crash, the reproducer is
replayed under gdb (when installed) for the native stack, and the crash is
located: "ours" when executorch_tensorrt code (the adapter library or the
Python package) is on the stack, else "executorch" or "unknown".

    python tools/fuzz/fuzz.py --out fuzz-out --cases 100000 --time 3600 --jobs 2

--cold-threads N mutates nothing: each case loads the program and N threads
make the first calls of the fresh method at once (failed calls count as
clean_error, disagreeing threads as wrong_output).

writes fuzz-out/summary.json, fuzz-out/summary.md and fuzz-out/repro/ (the
mutated programs that crashed or gave wrong outputs). See docs/security.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_runner import (  # noqa: E402
    OUR_CODE_MARKERS,
    OUTCOMES,
    Calls,
    Case,
    ForkServer,
    crash_site,
    locate_crash,
    python_site,
    native_backtrace,
    reference_outputs,
    run_program,
)

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per child: 2 cores, many children
os.environ["EXECUTORCH_TENSORRT_FALLBACK"] = "onnxruntime"

# Regions this project writes: a mutation there must end in a clean error or
# the same output once digests exist.
OUR_REGION_KINDS = ("header", "json", "engine", "onnx")
INTERESTING = [0, 1, 15, 16, 31, 32, 33, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, 2**31,
               2**32 - 16, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 16, 2**64 - 1]
JSON_BYTES = b'{}[]",:-0123456789.eEtfnu\\ \x00\x7f\xff'
BLOB_FIELDS = [(4, 4), (8, 4), (12, 4), (16, 8), (24, 8)]  # TR01 header fields after the magic
# FH01 header fields, from the header's start (byte 8 of the .ptd): length,
# flatbuffer_offset, flatbuffer_size, segment_base_offset, segment_data_size.
PTD_FIELDS = [(4, 4), (8, 8), (16, 8), (24, 8), (32, 8)]
# .ptd regions: a mutation there must end in a clean error or the same output.
PTD_REGION_KINDS = ("ptd_header", "ptd_index", "ptd_segments")


@dataclass(frozen=True)
class Region:
    name: str  # e.g. "blob0.engine", "flatbuffer"
    kind: str  # header, json, engine, onnx, section, pte_header, flatbuffer, file
    start: int
    end: int


def program_regions(pte: bytes) -> list[Region]:
    """The regions of a .pte: its extended header, flatbuffer, and each TR01 blob's parts."""
    from executorch_tensorrt.blob.reader import parse

    regions = [Region("file", "file", 0, len(pte))]
    if pte[8:12] == b"eh00":
        hlen, program_size = struct.unpack_from("<IQ", pte, 12)
        regions.append(Region("pte_header", "pte_header", 8, 8 + hlen))
        regions.append(Region("flatbuffer", "flatbuffer", 8 + hlen, min(program_size, len(pte))))
    found = 0
    for m in re.finditer(b"TR01", pte):
        try:
            layout = parse(memoryview(pte)[m.start():])
        except ValueError:
            continue  # the magic by chance, not a blob
        at, n = m.start(), f"blob{found}"
        regions.append(Region(f"{n}.header", "header", at, at + 32))
        regions.append(Region(f"{n}.json", "json", at + layout.metadata_offset,
                              at + layout.metadata_offset + layout.metadata_size))
        regions.append(Region(f"{n}.engine", "engine", at + layout.engine_offset,
                              at + layout.engine_offset + layout.engine_size))
        for name, off, size, _ in layout.sections:
            kind = "onnx" if name == "onnx" else "section"
            if size:
                regions.append(Region(f"{n}.{name}", kind, at + off, at + off + size))
        found += 1
    if not found:
        raise SystemExit("no TR01 blob found in the program: nothing of ours to fuzz")
    return regions


def ptd_regions(ptd: bytes) -> list[Region]:
    """The regions of a .ptd: its FH01 header, its flatbuffer index (the root
    offset and the table after the header), its segments (the weights)."""
    if ptd[8:12] != b"FH01":
        raise SystemExit("the .ptd has no FH01 header")
    fb_offset, fb_size, base, size = struct.unpack_from("<QQQQ", ptd, 16)
    return [Region("ptd.header", "ptd_header", 8, 48),
            Region("ptd.root", "ptd_index", 0, 4),
            Region("ptd.index", "ptd_index", fb_offset, fb_offset + fb_size),
            Region("ptd.segments", "ptd_segments", base, base + size)]


def mutate(rng: random.Random, pte: bytes, region: Region) -> tuple[bytes, str]:
    """One mutation inside `region`; returns the program and the operator's name."""
    d = bytearray(pte)
    a, b = region.start, region.end
    ops = ["bytes", "bit", "int", "zero_run", "truncate", "insert", "delete"]
    if region.kind in ("header", "ptd_header"):
        ops += ["field"] * 4
    if region.kind == "json":
        ops += ["json_char"] * 4
    op = rng.choice(ops)
    pos = rng.randrange(a, b)
    if op == "bytes":
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(a, b)] = rng.randrange(256)
    elif op == "bit":
        d[pos] ^= 1 << rng.randrange(8)
    elif op in ("int", "field"):
        fields = PTD_FIELDS if region.kind == "ptd_header" else BLOB_FIELDS
        off, width = (rng.choice(fields) if op == "field" else
                      (pos - a, rng.choice([1, 2, 4, 8])))
        value = rng.choice(INTERESTING) % (1 << (8 * width))
        raw = value.to_bytes(width, "little")[: b - (a + off)]
        d[a + off:a + off + len(raw)] = raw
    elif op == "zero_run":
        end = min(b, pos + rng.randint(1, 64))
        d[pos:end] = bytes(end - pos)
    elif op == "json_char":
        d[pos] = rng.choice(JSON_BYTES)
    elif op == "truncate":
        del d[pos:]
    elif op == "insert":
        d[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    else:  # delete
        del d[pos:min(b, pos + rng.randint(1, 16))]
    return bytes(d), op


# ------------------------------------------------------------------ driver


# the stateful seed: a KV-cache decoder whose case is a prefill then a decode
# step on one method, so mutations of the state metadata meet a cache in use
DECODER = "decoder"


def seed_program(example: str, out: Path, pte: Path | None, external: bool = False):
    """(program bytes, inputs) for the example model; exports it unless `pte` is
    given. `external`: its weights in `<stem>.ptd` beside it. For `decoder`,
    inputs is a fuzz_runner.Calls (calls made one after another)."""
    import executorch_tensorrt

    if example == DECODER:
        import torch
        from executorch_tensorrt.examples import llm

        torch.manual_seed(0)
        model = llm.CachedDecoder().eval().requires_grad_(False)
        (tokens, positions), dynamic = llm.decoder_example()
        inputs = Calls([(tokens, positions), (torch.tensor([[7]]), torch.tensor([3]))])
        export_args = (model, (tokens, positions))
        options = {"dynamic_shapes": dynamic}
    else:
        from executorch_tensorrt.examples.models import example as make_example

        model, example_inputs = make_example(example)
        inputs = tuple(example_inputs)
        export_args, options = (model, example_inputs), {}
    if pte is None:
        pte = out / f"seed-{example}{'-ptd' if external else ''}.pte"
        if not pte.exists():
            executorch_tensorrt.export(*export_args, pte, progress=None, **options,
                                       **({"external_weights": True} if external else {}))
    return pte.read_bytes(), inputs


def summarize(cases: list[Case], seconds: float, seed: int, regions: list[Region]) -> dict:
    by_kind: dict[str, Counter] = {}
    for c in cases:
        by_kind.setdefault(c.kind, Counter())[c.outcome] += 1
    errors: dict[str, Counter] = {}
    for c in cases:
        if c.outcome == "clean_error":  # the message without numbers: one line per kind of fault
            errors.setdefault(c.kind, Counter())[
                re.sub(r"[0-9a-f]{8,}|\b\d{3,}\b", "N", c.detail)[:160]] += 1
    return {
        "cases": len(cases), "seconds": round(seconds, 1), "seed": seed,
        "outcomes": dict(Counter(c.outcome for c in cases)),
        "by_region_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "crashes": _crash_table(asdict(c) for c in cases),
        "regions": [asdict(r) for r in regions],
        "top_errors": {k: v.most_common(5) for k, v in sorted(errors.items())},
        # refusals that were not deliberate: our executors record a traceback
        # for an exception that is not one of the errors they raise on purpose
        "unexpected_errors": [asdict(c) for c in cases
                              if c.outcome == "clean_error" and "Traceback" in c.detail][:20],
        "findings": [asdict(c) for c in cases if c.outcome in ("crash", "wrong_output", "hang")],
    }


def _crash_table(cases) -> list[dict]:
    """Crashes grouped by region kind, location, signal and site."""
    crashes = Counter((c["kind"], c["location"], c["detail"], c["site"]) for c in cases
                      if c["outcome"] == "crash")
    return [{"region_kind": k, "location": loc, "signal": sig, "site": site, "count": n}
            for (k, loc, sig, site), n in crashes.most_common()]


def markdown(summary: dict) -> str:
    rows = ["| region | " + " | ".join(OUTCOMES) + " |", "|---" * (len(OUTCOMES) + 1) + "|"]
    for kind, counts in summary["by_region_kind"].items():
        rows.append(f"| {kind} | " + " | ".join(str(counts.get(o, 0)) for o in OUTCOMES) + " |")
    total = summary["outcomes"]
    rows.append("| **all** | " + " | ".join(str(total.get(o, 0)) for o in OUTCOMES) + " |")
    lines = [f"{summary['cases']} cases in {summary['seconds']} s (seed {summary['seed']})", "",
             *rows, ""]
    if summary["crashes"]:
        lines += ["| crashes: region | location | signal | site | count |", "|---|---|---|---|---|"]
        lines += [f"| {c['region_kind']} | {c['location']} | {c['signal']} | {c['site'] or '?'} "
                  f"| {c['count']} |" for c in summary["crashes"]]
    return "\n".join(lines) + "\n"


def fuzz(args) -> dict:
    out = Path(args.out)
    (out / "repro").mkdir(parents=True, exist_ok=True)
    pte, inputs = seed_program(args.example, out, Path(args.pte) if args.pte else None,
                               external=args.ptd)
    if args.ptd:  # the cases mutate the .ptd beside the program; the program stays
        import fuzz_runner

        seed_pte = Path(args.pte) if args.pte else out / f"seed-{args.example}-ptd.pte"
        fuzz_runner.PTD_PROGRAM = pte
        pte = seed_pte.with_suffix(".ptd").read_bytes()
        regions = ptd_regions(pte)
    else:
        regions = program_regions(pte)
    if args.cold_threads:  # every case is the unmutated program, called cold from N threads
        regions = [Region("cold_threads", "cold_threads", 0, len(pte))]
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-", dir=out))
    # The reference outputs come from a child too: the parent never runs a
    # program, so it starts no thread pools before forking.
    reference = reference_outputs(pte, inputs, scratch)  # one thread
    if args.cold_threads:
        import fuzz_runner

        fuzz_runner.COLD_THREADS = args.cold_threads
    if reference is None:
        raise SystemExit("the unmutated program does not run (its error is above)")
    server = ForkServer(inputs, reference, args.jobs, args.timeout, scratch)

    rng = random.Random(args.seed)
    weights = {"header": 3, "json": 4, "engine": 2, "onnx": 3, "section": 1, "pte_header": 1,
               "flatbuffer": 3, "file": 2, "ptd_header": 2, "ptd_index": 4, "ptd_segments": 2}
    pool = [r for r in regions if r.end > r.start]
    cases: list[Case] = []
    start = time.monotonic()

    def record(done):
        for case, data, stderr in done:
            cases.append(case)
            if case.outcome in ("crash", "wrong_output", "hang"):
                suffix = ".ptd" if args.ptd else ".pte"
                path = out / "repro" / f"{case.outcome}-{case.index:06d}-{case.region}{suffix}"
                path.write_bytes(data)
                case.repro = str(path)
            if case.outcome == "crash":  # located from Python frames now, native ones at the end
                case.location = locate_crash(stderr, "")
                case.site = python_site(stderr)
                Path(case.repro).with_suffix(".stack").write_text(stderr)

    for i in range(args.cases):
        if time.monotonic() - start > args.time:
            break
        region = rng.choices(pool, [weights.get(r.kind, 1) for r in pool])[0]
        data, op = (pte, "cold") if args.cold_threads else mutate(rng, pte, region)
        server.submit(Case(i, region.name, region.kind, op), data)
        record(server.take_finished())
        if i and i % args.report_every == 0:  # a long run that is stopped still leaves figures
            write_summary(out, cases, time.monotonic() - start, args.seed, regions)
            print(f"[fuzz] {i} cases, {time.monotonic() - start:.0f} s", file=sys.stderr)
    record(server.take_finished(wait=True))
    scratch.rmdir()
    write_summary(out, cases, time.monotonic() - start, args.seed, regions)
    # gdb replays take tens of seconds each: after the run, not inside it
    return locate_again(out, args.example, args.max_gdb, timeout=300)


def write_summary(out: Path, cases: list[Case], seconds: float, seed: int,
                  regions: list[Region]) -> dict:
    summary = summarize(sorted(cases, key=lambda c: c.index), seconds, seed, regions)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    return summary


def _import_everything() -> None:
    """What a case needs, imported once here so that forked children start warm."""
    import executorch.runtime  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    import executorch_tensorrt  # registers TensorRTBackend
    from executorch_tensorrt.runtime.onnxruntime import executor  # noqa: F401
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    try:
        load_tensorrt()
    except Exception:  # noqa: BLE001 - no TensorRT here: the executor reports it per case
        pass
    OUR_CODE_MARKERS.append(f"{Path(executorch_tensorrt.__file__).parent}/")


def _replay_command(repro: str, example: str) -> list[str]:
    # a .ptd reproducer replays beside the run's seed program (--out is its folder)
    ptd = ["--ptd", "--out", str(Path(repro).parent.parent)] if repro.endswith(".ptd") else []
    return [sys.executable, __file__, "--replay", repro, "--example", example, *ptd]


def locate_again(out: Path, example: str, limit: int | None = None,
                 timeout: float = 3600) -> dict:
    """Replays up to `limit` (None: all) crashes of the run in `out` that are not
    located yet under gdb, each for at most `timeout` seconds, and rewrites the summary."""
    summary = json.loads((out / "summary.json").read_text())
    for f in summary["findings"]:  # first from the stored Python stacks (no replay needed)
        if f["outcome"] == "crash" and f["location"] == "unknown":
            stack = Path(f["repro"]).with_suffix(".stack").read_text()
            f["location"], f["site"] = locate_crash(stack, ""), f["site"] or python_site(stack)
    unlocated = [f for f in summary["findings"]
                 if f["outcome"] == "crash" and f["location"] == "unknown"]
    for f in unlocated[:limit]:
        native = native_backtrace(_replay_command(f["repro"], example), timeout)
        stack = Path(f["repro"]).with_suffix(".stack")
        f["location"] = locate_crash(stack.read_text(), native)
        f["site"] = crash_site(native) or f["site"]
        stack.write_text(stack.read_text() + "\n" + native)
    summary["crashes"] = _crash_table(summary["findings"])
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="fuzz-out", help="directory for summary and reproducers")
    p.add_argument("--example", default="bitwise", help="built-in model (its inputs are used), or 'decoder': a KV-cache "
                        "decoder, each case a prefill and a decode step")
    p.add_argument("--pte", help="program to mutate (default: the example, exported)")
    p.add_argument("--ptd", action="store_true",
                   help="export the example with its weights in a .ptd and mutate the .ptd")
    p.add_argument("--cold-threads", type=int, default=0, metavar="N",
                   help="no mutation: N threads make the first calls of each freshly loaded "
                        "method (not in CI)")
    p.add_argument("--cases", type=int, default=1000, help="case budget")
    p.add_argument("--time", type=float, default=600, help="time budget in seconds")
    p.add_argument("--jobs", type=int, default=2, help="children at once")
    p.add_argument("--timeout", type=float, default=30, help="seconds before a case is a hang")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-gdb", type=int, default=10,
                   help="crash replays under gdb at the end of the run")
    p.add_argument("--report-every", type=int, default=1000, help="cases between summaries")
    p.add_argument("--replay", help="run one program (a reproducer) in this process")
    p.add_argument("--locate", action="store_true",
                   help="replay the unlocated crashes of the run in --out under gdb")
    args = p.parse_args(argv)
    if args.cold_threads and args.ptd:
        p.error("--cold-threads runs the unmutated program: not with --ptd")
    if args.cold_threads and args.example == DECODER:
        p.error("--cold-threads: a stateful program's method is not shared by threads")
    _import_everything()

    if args.replay:
        import faulthandler

        faulthandler.enable()  # Python frames for locate_crash, beside gdb's native ones
        if args.ptd:  # a mutated .ptd beside the run's seed program
            import fuzz_runner

            seed = Path(args.out) / f"seed-{args.example}-ptd.pte"
            fuzz_runner.PTD_PROGRAM, inputs = seed_program(args.example, Path(args.out), seed)
        else:
            _, inputs = seed_program(args.example, Path(args.out), Path(args.replay))
        print(run_program(Path(args.replay).read_bytes(), inputs))
        return 0
    summary = locate_again(Path(args.out), args.example) if args.locate else fuzz(args)
    print(markdown(summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
