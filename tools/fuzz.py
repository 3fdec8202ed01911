#!/usr/bin/env python3
"""Fuzzes .pte programs with TensorRT delegates through the real executorch.runtime.

Each case mutates one region of a program (the blob's header fields, its JSON
metadata, engine or ONNX section, ExecuTorch's flatbuffer and extended header,
or the whole file; byte edits, interesting integers, truncation, insertion),
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

    python tools/fuzz.py --out fuzz-out --cases 100000 --time 3600 --jobs 2

writes fuzz-out/summary.json, fuzz-out/summary.md and fuzz-out/repro/ (the
mutated programs that crashed or gave wrong outputs). See docs/security.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per child: 2 cores, many children
os.environ["EXECUTORCH_TENSORRT_FALLBACK"] = "onnxruntime"

OUTCOMES = ("clean_error", "same_output", "wrong_output", "crash", "hang")
# Regions this project writes: a mutation there must end in a clean error or
# the same output once digests exist.
OUR_REGION_KINDS = ("header", "json", "engine", "onnx")
# Frames of our code: the adapter library, or a Python file of the installed
# package (its directory is added at start-up, see _import_everything).
OUR_CODE_MARKERS = ["libexecutorch_backend_tensorrt"]
EXECUTORCH_MARKERS = ("libexecutorch", "executorch/extension", "_portable_lib", "executorch::")
INTERESTING = [0, 1, 15, 16, 31, 32, 33, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, 2**31,
               2**32 - 16, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 16, 2**64 - 1]
JSON_BYTES = b'{}[]",:-0123456789.eEtfnu\\ \x00\x7f\xff'
BLOB_FIELDS = [(4, 4), (8, 4), (12, 4), (16, 8), (24, 8)]  # TR01 header fields after the magic


@dataclass(frozen=True)
class Region:
    name: str  # e.g. "blob0.engine", "flatbuffer"
    kind: str  # header, json, engine, onnx, section, pte_header, flatbuffer, file
    start: int
    end: int


@dataclass
class Case:
    index: int
    region: str
    kind: str
    operator: str
    outcome: str = ""
    detail: str = ""
    location: str = ""  # crashes: ours, executorch, unknown
    site: str = ""  # crashes: the innermost native function that is not libc/unwinding
    repro: str = ""


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


def mutate(rng: random.Random, pte: bytes, region: Region) -> tuple[bytes, str]:
    """One mutation inside `region`; returns the program and the operator's name."""
    d = bytearray(pte)
    a, b = region.start, region.end
    ops = ["bytes", "bit", "int", "zero_run", "truncate", "insert", "delete"]
    if region.kind == "header":
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
        off, width = (rng.choice(BLOB_FIELDS) if op == "field" else
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


# ------------------------------------------------------------------ child side


def _run_program(data: bytes, inputs):
    from executorch.runtime import Runtime, Verification

    program = Runtime.get().load_program(data, verification=Verification.InternalConsistency)
    return list(program.load_method("forward").execute(inputs))


def _same(outputs, reference) -> bool:
    import torch

    if len(outputs) != len(reference):
        return False
    for o, r in zip(outputs, reference):
        if not (isinstance(o, torch.Tensor) and o.dtype == r.dtype and o.shape == r.shape
                and (torch.equal(o, r) or torch.allclose(o, r, rtol=0, atol=0, equal_nan=True))):
            return False
    return True


def _child(data: bytes, inputs, reference, err_fd: int, out_fd: int) -> None:
    """Runs in the forked child: never returns."""
    import faulthandler

    os.dup2(err_fd, 2)
    os.dup2(err_fd, 1)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        outputs = _run_program(data, inputs)
        result = {"outcome": "same_output" if _same(outputs, reference) else "wrong_output"}
        if result["outcome"] == "wrong_output":
            result["detail"] = repr([tuple(o.shape) for o in outputs])[:300]
    except BaseException as e:  # noqa: BLE001 - any exception is a clean error
        from executorch_tensorrt import last_error

        cause = last_error()  # what our code refused, when it was ours
        detail = f"{type(e).__name__}: {e}" + (f" [executorch_tensorrt: {cause}]" if cause else "")
        result = {"outcome": "clean_error", "detail": detail[:300]}
    os.write(out_fd, json.dumps(result).encode())
    os._exit(0)


@dataclass
class _Running:
    pid: int
    case: Case
    data: bytes
    out_r: int
    err_path: Path
    deadline: float


class ForkServer:
    """Runs cases in children forked from this (fully imported) process, `jobs` at once."""

    def __init__(self, inputs, reference, jobs: int, timeout: float, scratch: Path):
        self.inputs, self.reference, self.jobs, self.timeout = inputs, reference, jobs, timeout
        self.scratch = scratch
        self.running: list[_Running] = []
        self.finished: list[tuple[Case, bytes, str]] = []

    def submit(self, case: Case, data: bytes) -> None:
        while len(self.running) >= self.jobs:
            self.finished += self.poll(block=True)
        err_path = self.scratch / f"case{case.index}.err"
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            _child(data, self.inputs, self.reference, err_fd, out_w)
        os.close(err_fd)
        os.close(out_w)
        self.running.append(_Running(pid, case, data, out_r, err_path,
                                     time.monotonic() + self.timeout))

    def poll(self, block: bool) -> list[tuple[Case, bytes, str]]:
        """Reaps finished children; returns (case, data, stderr) for each."""
        done = []
        while True:
            now = time.monotonic()
            for r in list(self.running):
                pid, status = os.waitpid(r.pid, os.WNOHANG)
                if pid == 0 and now > r.deadline:
                    os.kill(r.pid, signal.SIGKILL)
                    os.waitpid(r.pid, 0)
                    r.case.outcome, r.case.detail = "hang", f"no result after {self.timeout:.0f} s"
                elif pid == 0:
                    continue
                else:
                    self._classify(r, status)
                os.close(r.out_r)
                stderr = r.err_path.read_text(errors="replace")[-20000:]
                r.err_path.unlink()
                self.running.remove(r)
                done.append((r.case, r.data, stderr))
            if done or not block or not self.running:
                return done
            select.select([r.out_r for r in self.running], [], [], 0.005)

    def _classify(self, r: _Running, status: int) -> None:
        raw = b""
        while chunk := _read_nonblocking(r.out_r):
            raw += chunk
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            r.case.outcome, r.case.detail = "crash", signal.Signals(sig).name
        elif raw:
            result = json.loads(raw)
            r.case.outcome, r.case.detail = result["outcome"], result.get("detail", "")
        else:
            r.case.outcome = "crash"
            r.case.detail = f"exit status {os.WEXITSTATUS(status)} without a result"

    def take_finished(self, wait: bool = False) -> list[tuple[Case, bytes, str]]:
        """Cases finished so far; with `wait`, after every running one finished."""
        out, self.finished = self.finished, []
        out += self.poll(block=False)
        while wait and self.running:
            out += self.poll(block=True)
        return out


def _read_nonblocking(fd: int) -> bytes:
    ready, _, _ = select.select([fd], [], [], 0)
    return os.read(fd, 65536) if ready else b""


# ------------------------------------------------------------------ crash location


def locate_crash(stderr: str, native: str) -> str:
    text = stderr + "\n" + native
    frames = [ln for ln in text.splitlines() if ln.strip().startswith(("File ", "#"))]
    joined = "\n".join(frames)
    if any(m in joined for m in OUR_CODE_MARKERS):
        return "ours"
    if any(m in joined for m in EXECUTORCH_MARKERS):
        return "executorch"
    return "unknown"


_RUNTIME_NOISE = ("__pthread", "raise", "abort", "__GI_", "_Unwind", "__gxx", "std::terminate",
                  "__cxa", "libstdc++", "libgcc_s", "libc.so")


def crash_site(native: str) -> str:
    """The innermost frames outside libc and C++ unwinding, up to the first
    named function: 'function (library)' entries joined by ' <- '."""
    entries: list[str] = []
    for line in native.splitlines():
        m = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?([^\s(]+)", line)
        if not m or any(n in line for n in _RUNTIME_NOISE):
            continue
        lib = re.search(r" from (\S+)\s*$", line)
        name = Path(lib.group(1)).name if lib else ""
        entry = f"{m.group(1)} ({name})" if name else m.group(1)
        if not entries or entries[-1] != entry:
            entries.append(entry)
        if m.group(1) != "??":
            break
    return " <- ".join(entries)


def native_backtrace(repro: Path, example: str, timeout: float = 120) -> str:
    """The crash's native stack from a replay under gdb, or "" without gdb."""
    import shutil

    gdb = shutil.which("gdb")
    if gdb is None:
        return ""
    cmd = [gdb, "-batch", "-nx", "-ex", "run", "-ex", "bt 40", "--args", sys.executable,
           __file__, "--replay", str(repro), "--example", example]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""
    return "\n".join(ln for ln in proc.stdout.splitlines() if ln.startswith("#"))


# ------------------------------------------------------------------ driver


def seed_program(example: str, out: Path, pte: Path | None):
    """(program bytes, inputs) for the example model; exports it unless `pte` is given."""
    import executorch_tensorrt
    from executorch_tensorrt.tools.models import example as make_example

    model, inputs = make_example(example)
    if pte is None:
        pte = out / f"seed-{example}.pte"
        if not pte.exists():
            executorch_tensorrt.export(model, inputs, pte, progress=None)
    return pte.read_bytes(), tuple(inputs)


def summarize(cases: list[Case], seconds: float, seed: int, regions: list[Region]) -> dict:
    by_kind: dict[str, Counter] = {}
    for c in cases:
        by_kind.setdefault(c.kind, Counter())[c.outcome] += 1
    crashes = Counter((c.kind, c.location, c.detail, c.site) for c in cases
                      if c.outcome == "crash")
    errors: dict[str, Counter] = {}
    for c in cases:
        if c.outcome == "clean_error":  # the message without numbers: one line per kind of fault
            errors.setdefault(c.kind, Counter())[
                re.sub(r"[0-9a-f]{8,}|\b\d{3,}\b", "N", c.detail)[:160]] += 1
    return {
        "cases": len(cases), "seconds": round(seconds, 1), "seed": seed,
        "outcomes": dict(Counter(c.outcome for c in cases)),
        "by_region_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "crashes": [{"region_kind": k, "location": loc, "signal": s, "site": site, "count": n}
                    for (k, loc, s, site), n in crashes.most_common()],
        "regions": [asdict(r) for r in regions],
        "top_errors": {k: v.most_common(5) for k, v in sorted(errors.items())},
        "findings": [asdict(c) for c in cases if c.outcome in ("crash", "wrong_output", "hang")],
    }


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
    pte, inputs = seed_program(args.example, out, Path(args.pte) if args.pte else None)
    regions = program_regions(pte)
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-", dir=out))
    # The reference outputs come from a child too: the parent never runs a
    # program, so it starts no thread pools before forking.
    reference = _reference_outputs(pte, inputs, scratch)
    if reference is None:
        raise SystemExit("the unmutated program does not run (its error is above)")
    server = ForkServer(inputs, reference, args.jobs, args.timeout, scratch)

    rng = random.Random(args.seed)
    weights = {"header": 3, "json": 4, "engine": 2, "onnx": 3, "section": 1, "pte_header": 1,
               "flatbuffer": 3, "file": 2}
    pool = [r for r in regions if r.end > r.start]
    cases: list[Case] = []
    start = time.monotonic()
    gdb_runs = 0

    def record(done):
        nonlocal gdb_runs
        for case, data, stderr in done:
            cases.append(case)
            if case.outcome in ("crash", "wrong_output", "hang"):
                path = out / "repro" / f"{case.outcome}-{case.index:06d}-{case.region}.pte"
                path.write_bytes(data)
                case.repro = str(path)
            if case.outcome == "crash":
                native = ""
                if gdb_runs < args.max_gdb:
                    gdb_runs += 1
                    native = native_backtrace(Path(case.repro), args.example)
                case.location = locate_crash(stderr, native)
                case.site = crash_site(native)
                (Path(case.repro).with_suffix(".stack")).write_text(stderr + "\n" + native)

    for i in range(args.cases):
        if time.monotonic() - start > args.time:
            break
        region = rng.choices(pool, [weights.get(r.kind, 1) for r in pool])[0]
        data, op = mutate(rng, pte, region)
        server.submit(Case(i, region.name, region.kind, op), data)
        record(server.take_finished())
    record(server.take_finished(wait=True))
    cases.sort(key=lambda c: c.index)
    summary = summarize(cases, time.monotonic() - start, args.seed, regions)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    scratch.rmdir()
    return summary


def _reference_outputs(pte: bytes, inputs, scratch: Path):
    """Runs the program in a child and returns its outputs (through a file)."""
    import torch

    path = scratch / "reference.pt"
    pid = os.fork()
    if pid == 0:
        try:
            torch.save(_run_program(pte, inputs), path)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    if not path.exists():
        return None
    outputs = torch.load(path)
    path.unlink()
    return outputs


def _import_everything() -> None:
    """What a case needs, imported once here so that forked children start warm."""
    import executorch.runtime  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    import executorch_tensorrt  # registers TensorRTBackend
    from executorch_tensorrt.runtime import onnxruntime_executor  # noqa: F401
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    try:
        load_tensorrt()
    except Exception:  # noqa: BLE001 - no TensorRT here: the executor reports it per case
        pass
    OUR_CODE_MARKERS.append(f"{Path(executorch_tensorrt.__file__).parent}/")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="fuzz-out", help="directory for summary and reproducers")
    p.add_argument("--example", default="bitwise", help="built-in model (its inputs are used)")
    p.add_argument("--pte", help="program to mutate (default: the example, exported)")
    p.add_argument("--cases", type=int, default=1000, help="case budget")
    p.add_argument("--time", type=float, default=600, help="time budget in seconds")
    p.add_argument("--jobs", type=int, default=2, help="children at once")
    p.add_argument("--timeout", type=float, default=30, help="seconds before a case is a hang")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-gdb", type=int, default=10, help="crash replays under gdb")
    p.add_argument("--replay", help="run one program (a reproducer) in this process")
    args = p.parse_args(argv)
    _import_everything()

    if args.replay:
        _, inputs = seed_program(args.example, Path(args.out), Path(args.replay))
        print(_run_program(Path(args.replay).read_bytes(), inputs))
        return 0
    summary = fuzz(args)
    print(markdown(summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
