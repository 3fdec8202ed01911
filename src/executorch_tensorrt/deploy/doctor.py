"""What this machine can do with TensorRT programs (`executorch-tensorrt doctor`):
the CUDA driver and GPUs (asked of the driver loaded at run time), the TensorRT
found and what it builds and runs, ExecuTorch and the torch its Python runtime
needs, the adapter's ABI, the engine cache; given a program, each partition's first load (prepare.first_load)."""
from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..runtime.executor import STAND_IN_ENV


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: str  # e.g. "SM89"


@dataclass
class Report:
    driver: str  # the CUDA driver's version, or why there is none
    gpus: list[Gpu]
    tensorrt: str  # flavour and version, or why none imports
    builds_for: list[str]
    runs_here: bool
    why_not: str | None  # why TensorRT cannot run an engine here
    executorch: str
    executorch_cuda: bool
    torch: str  # the installed version
    torch_mismatch: str | None  # why the installed torch breaks ExecuTorch's Python runtime
    adapter_abi: int
    cache: str
    cache_bytes: int
    first_load: list[dict] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)  # per partition: found in named data?
    stand_in: str | None = None  # a test-only stand-in replaces TensorRT's context

    def to_json(self) -> dict:
        return asdict(self)


def _driver() -> tuple[str, list[Gpu], str | None]:
    from ..runtime.cuda.driver import driver
    from ..runtime.cuda.probe import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    try:
        cuda = driver()
    except OSError:
        return "none (libcuda.so.1 cannot be loaded)", [], reason
    version = ctypes.c_int(0)
    if cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return "unknown", [], reason
    text = f"CUDA {version.value // 1000}.{version.value % 1000 // 10}"
    if reason:
        return text, [], reason
    count, gpus = ctypes.c_int(0), []
    cuda.cuDeviceGetCount(ctypes.byref(count))
    for k in range(count.value):
        dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGet(ctypes.byref(dev), k)
        cuda.cuDeviceGetName(name, 256, dev)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # compute capability major
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
        gpus.append(Gpu(k, name.value.decode(errors="replace"), f"SM{major.value}{minor.value}"))
    return text, gpus, None


def _required(package: str) -> str | None:
    """The exact version of `package` this distribution requires, if it pins one."""
    try:
        requires = importlib.metadata.requires("executorch-tensorrt") or []
    except importlib.metadata.PackageNotFoundError:  # a source checkout on the path
        return None
    for line in requires:
        found = re.fullmatch(rf"{re.escape(package)}\s*==\s*([^\s;]+)(\s*;.*)?", line.strip())
        if found:
            return found.group(1)
    return None


def torch_check(executorch: str) -> tuple[str, str | None]:
    """The installed torch, and why it breaks `executorch.runtime` when it is not
    the one ExecuTorch's Python bindings were compiled against (they link
    libtorch and read its tensors' layout: a mismatch fails at the first call,
    e.g. "tensor does not have a device")."""
    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed", ("executorch.runtime needs torch; pip install "
                                 "executorch-tensorrt installs the one it was built with")
    wanted = _required("torch")
    if wanted is None or installed.split("+")[0] == wanted.split("+")[0]:
        return installed, None
    return installed, (f"ExecuTorch {executorch}'s Python bindings are built for torch {wanted}, "
                       f"and torch {installed} is installed: executorch.runtime (and run, bench, "
                       f"selftest) can fail at the first call. Install torch=={wanted}, or run "
                       "programs through ExecuTorch's C++ runtime (docs/cpp.md), which needs no "
                       "torch")


def _cache_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def diagnose(program: str | Path | None = None, data: str | Path | None = None) -> Report:
    from ..errors import TensorRTNotInstalledError
    from ..runtime.adapter.abi import ETRT_EXECUTOR_ABI_VERSION
    from ..runtime.tensorrt.portability import cache_dir
    from ..tensorrt.flavor import load_tensorrt

    driver_text, gpus, why_not = _driver()
    try:
        trt = load_tensorrt()
        found = f"{trt.flavor} {trt.version}"
        members = getattr(trt.module, "ComputeCapability", None)
        builds = ([k for k in members.__members__ if k.startswith("SM")] if trt.is_rtx and members
                  else ["this GPU's capability (standard TensorRT builds for the GPU present)"])
    except TensorRTNotInstalledError as e:
        trt, found, builds = None, f"none ({e})", []
        why_not = why_not or str(e)
    if why_not is None and trt is not None and trt.is_rtx:
        refused = [g for g in gpus if g.capability not in builds]
        if len(refused) == len(gpus):
            why_not = (f"{trt.flavor} {trt.version} supports {', '.join(builds)}; this machine's "
                       f"GPUs are {', '.join(g.capability for g in gpus)}")
    try:
        executorch = importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError:
        executorch = "not installed"
    spec = importlib.util.find_spec("executorch")
    # ExecuTorch's CUDA wheels carry its CUDA backend's library beside libexecutorch.
    et_cuda = bool(spec and spec.origin and any(
        "cuda" in p.name for p in (Path(spec.origin).parent / "lib").glob("*.so*")))
    folder = cache_dir()
    report = Report(driver_text, gpus, found, builds, why_not is None, why_not, executorch,
                    et_cuda, *torch_check(executorch), ETRT_EXECUTOR_ABI_VERSION, str(folder),
                    _cache_bytes(folder))
    report.stand_in = os.environ.get(STAND_IN_ENV) or None
    if program is not None:
        from .prepare import first_load, weights_found

        report.first_load = [asdict(p) for p in first_load(program)]
        report.weights = weights_found(program, data)
    return report


def format_report(report: Report) -> str:
    lines = [
        f"CUDA driver:   {report.driver}",
        "GPUs:          " + ("; ".join(f"{g.index}: {g.name} ({g.capability})" for g in report.gpus)
                             or "none"),
        f"TensorRT:      {report.tensorrt}",
        f"  builds for:  {', '.join(report.builds_for) or 'nothing'}",
        f"  runs here:   {'yes' if report.runs_here else 'no: ' + str(report.why_not)}",
        f"ExecuTorch:    {report.executorch} (CUDA build: {'yes' if report.executorch_cuda else 'no'})",
        f"torch:         {report.torch}" + (f" (MISMATCH: {report.torch_mismatch})"
                                               if report.torch_mismatch else ""),
        f"adapter ABI:   {report.adapter_abi}",
        f"engine cache:  {report.cache} ({report.cache_bytes} bytes)",
    ]
    if report.stand_in:
        lines.append(f"STAND-IN:      {STAND_IN_ENV}={report.stand_in}: a FAKE, test-only "
                     "stand-in replaces TensorRT's execution context; no real engine runs")
    if report.weights:
        lines += ["weights (named data):"] + [f"  {w}" for w in report.weights]
    return "\n".join(lines)
