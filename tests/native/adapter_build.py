"""Builds the native adapter (and the test libraries) with CMake for tests.

One build per pytest process, shared by every test module that imports this
helper (tests/native/* and tests/runtime/adapter/test_registration.py). Registration is per
process, so tests that load the adapter do it in a subprocess
(``run_python``), with EXECUTORCH_TENSORRT_ADAPTER pointing at this build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"
SRC = REPO / "src"
ADAPTER_FILENAME = "libexecutorch_backend_tensorrt.so"


@dataclass(frozen=True)
class Build:
    build_dir: Path
    cmake: str
    configure_log: str

    @property
    def adapter(self) -> Path:
        return self.build_dir / "lib" / ADAPTER_FILENAME

    @property
    def driver(self) -> Path:
        return self.build_dir / "tests" / "libadapter_driver.so"

    @property
    def foreign(self) -> Path:
        return self.build_dir / "tests" / "libforeign_backend.so"


def system_cmake() -> str:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake is not on PATH; the adapter tests need it")
    return cmake


def build(build_dir: Path, cmake: str | None = None, *, tests: bool = True,
          extra_args: tuple[str, ...] = ()) -> Build:
    """Configures and builds native/ into build_dir; raises with the output on failure."""
    cmake = cmake or system_cmake()
    configure = [
        cmake, "-S", str(NATIVE), "-B", str(build_dir),
        f"-DPython_EXECUTABLE={sys.executable}",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DETRT_BUILD_TESTS={'ON' if tests else 'OFF'}",
        *extra_args,
    ]
    # A cmake from a pip venv finds its modules relative to itself; clear
    # variables that could point a child cmake at another installation.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMAKE_")}
    cfg = subprocess.run(configure, capture_output=True, text=True, env=env)
    if cfg.returncode != 0:
        raise RuntimeError(f"configure failed ({' '.join(configure)}):\n{cfg.stdout}\n{cfg.stderr}")
    bld = subprocess.run([cmake, "--build", str(build_dir), "-j", str(os.cpu_count() or 2)],
                         capture_output=True, text=True, env=env)
    if bld.returncode != 0:
        raise RuntimeError(f"build failed:\n{bld.stdout}\n{bld.stderr}")
    return Build(build_dir, cmake, cfg.stdout + cfg.stderr)


_lock = threading.Lock()
_default: Build | None = None


def default_build() -> Build:
    """The process-wide build with the CMake on PATH (built on first use)."""
    global _default
    with _lock:
        if _default is None:
            _default = build(Path(tempfile.mkdtemp(prefix="etrt-adapter-")))
        return _default


def run_python(code: str, *, adapter: Path | None, env: dict | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with src/ importable and the adapter
    selected by EXECUTORCH_TENSORRT_ADAPTER (unset when adapter is None)."""
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith("EXECUTORCH_TENSORRT_")}
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), str(Path(__file__).resolve().parent)]
        + ([child_env["PYTHONPATH"]] if child_env.get("PYTHONPATH") else []))
    if adapter is not None:
        child_env["EXECUTORCH_TENSORRT_ADAPTER"] = str(adapter)
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, env=child_env, timeout=timeout)


def check(proc: subprocess.CompletedProcess) -> str:
    """Asserts the child succeeded; returns its stdout."""
    assert proc.returncode == 0, (
        f"child failed ({proc.returncode})\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc.stdout
