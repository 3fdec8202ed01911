"""The fuzzer's runner: a fork server that runs each case in a fresh child,
classifies the outcome, and locates crashes (see tools/fuzz/fuzz.py)."""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

OUTCOMES = ("clean_error", "same_output", "wrong_output", "crash", "hang")
# Frames of our code: the adapter library, or a Python file of the installed
# package (fuzz.py adds its directory at start-up).
OUR_CODE_MARKERS = ["libexecutorch_backend_tensorrt"]
EXECUTORCH_MARKERS = ("libexecutorch", "executorch/extension", "_portable_lib", "executorch::")


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


# ------------------------------------------------------------------ child side


# Set by `fuzz_ptd`: the unmutated program whose .ptd the cases mutate; each
# case's data is then the .ptd, written to a file as users pass it.
PTD_PROGRAM: bytes | None = None


# Set by `--cold-threads N`: each case loads the program and N threads, released
# together by a barrier, make the first calls of the fresh method; any failed
# call is a clean error, any thread's other output a wrong output.
COLD_THREADS = 0


def _cold_calls(method, inputs) -> list:
    import threading

    barrier = threading.Barrier(COLD_THREADS)
    results: list = [None] * COLD_THREADS

    def call(i: int) -> None:
        barrier.wait()
        try:
            results[i] = list(method.execute(inputs))
        except Exception as e:  # noqa: BLE001 - reported below, for the classifier
            results[i] = e

    threads = [threading.Thread(target=call, args=(i,)) for i in range(COLD_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"{len(failed)} of {COLD_THREADS} cold calls failed: {failed[0]}")
    first = results[0]
    return first if all(_same(r, first) for r in results) else []


class Calls(list):
    """Inputs of several calls made one after another on one method (a stateful
    program: the second call reads the cache the first one wrote)."""


def _execute(method, inputs) -> list:
    if isinstance(inputs, Calls):
        return [o for call in inputs for o in method.execute(call)]
    return list(method.execute(inputs))


def run_program(data: bytes, inputs):
    from executorch.runtime import Runtime, Verification

    if COLD_THREADS:
        program = Runtime.get().load_program(data, verification=Verification.InternalConsistency)
        return _cold_calls(program.load_method("forward"), inputs)

    if PTD_PROGRAM is None:
        program = Runtime.get().load_program(data, verification=Verification.InternalConsistency)
    else:
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".ptd") as f:
            f.write(data)
            f.flush()
            program = Runtime.get().load_program(PTD_PROGRAM, data_path=f.name,
                                                 verification=Verification.InternalConsistency)
            return _execute(program.load_method("forward"), inputs)
    return _execute(program.load_method("forward"), inputs)


def _same(outputs, reference) -> bool:
    """Bit for bit the reference (NaN equal to NaN): onnxruntime on the CPU is deterministic."""
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
        outputs = run_program(data, inputs)
        result = {"outcome": "same_output" if _same(outputs, reference) else "wrong_output"}
        if result["outcome"] == "wrong_output":
            result["detail"] = repr([tuple(o.shape) for o in outputs])[:300]
    except BaseException as e:  # noqa: BLE001 - any exception is a clean error
        from executorch_tensorrt import last_error

        cause = last_error()  # what our code refused, when it was ours
        detail = f"{type(e).__name__}: {e}" + (f" [executorch_tensorrt: {cause}]" if cause else "")
        result = {"outcome": "clean_error", "detail": detail[:400]}
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


def innermost_python_frame(stderr: str) -> str:
    """The crashed thread's innermost Python frame in a faulthandler dump, or ""."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Current thread") and "most recent call first" in line:
            return next((ln.strip() for ln in lines[i + 1:] if ln.strip().startswith("File ")), "")
    return ""


def crashed_in_load_program(stderr: str) -> bool:
    """True when the crash happened inside `Runtime.load_program`: ExecuTorch's
    Program and FlatTensorDataMap loading, before any delegate's init, so no
    code of this backend can be on the native stack."""
    frame = innermost_python_frame(stderr)
    return "executorch/runtime/__init__.py" in frame and frame.endswith(" in load_program")


def python_site(stderr: str) -> str:
    """A crash site known from Python frames alone ("" when gdb must tell)."""
    return "Runtime.load_program (before any delegate init)" if crashed_in_load_program(stderr) else ""


def locate_crash(stderr: str, native: str) -> str:
    text = stderr + "\n" + native
    frames = [ln for ln in text.splitlines() if ln.strip().startswith(("File ", "#"))]
    joined = "\n".join(frames)
    if any(m in joined for m in OUR_CODE_MARKERS):
        return "ours"
    if any(m in joined for m in EXECUTORCH_MARKERS) or crashed_in_load_program(stderr):
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


def native_backtrace(replay: list[str], timeout: float = 300) -> str:
    """The native stack of the command `replay` (which crashes) under gdb, or "" without gdb."""
    import shutil

    gdb = shutil.which("gdb")
    if gdb is None:
        return ""
    cmd = [gdb, "-batch", "-nx", "-ex", "run", "-ex", "bt 40", "--args", *replay]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""
    return "\n".join(ln for ln in proc.stdout.splitlines() if ln.startswith("#"))


def reference_outputs(pte: bytes, inputs, scratch: Path):
    """Runs the program in a child and returns its outputs (through a file)."""
    import torch

    path = scratch / "reference.pt"
    pid = os.fork()
    if pid == 0:
        try:
            torch.save(run_program(pte, inputs), path)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    if not path.exists():
        return None
    outputs = torch.load(path)
    path.unlink()
    return outputs
