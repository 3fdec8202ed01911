"""A library of another architecture fails `import executorch_tensorrt` with
the file and both architectures named, never a loader crash (docs/aarch64.md).

The foreign library is the installed one with its ELF header's e_machine
rewritten to the other architecture (aarch64 on x86_64 and the reverse), so
the test runs in CI without a cross compiler or an emulator. Each case runs
in a fresh interpreter: registration is per process.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import executorch
from executorch_tensorrt.runtime.adapter import loader

HERE = platform.machine()
OTHER, OTHER_MACHINE = ("x86_64", 62) if HERE == "aarch64" else ("aarch64", 183)


def _retarget(src: Path, dst: Path) -> Path:
    """Copy of `src` whose ELF header says it is built for OTHER."""
    data = bytearray(src.read_bytes())
    assert data[:4] == b"\x7fELF" and data[5] == 1  # little-endian ELF
    data[18:20] = OTHER_MACHINE.to_bytes(2, "little")
    dst.write_bytes(bytes(data))
    return dst


def _import(env_extra: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECUTORCH_TENSORRT_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", "import executorch_tensorrt"], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_adapter_of_another_architecture_is_refused_by_name(tmp_path):
    installed = Path(loader.__file__).resolve().parents[2] / "lib" / loader.ADAPTER_FILENAME
    foreign = _retarget(installed, tmp_path / loader.ADAPTER_FILENAME)
    proc = _import({loader.ADAPTER_ENV: str(foreign)}, tmp_path)
    assert proc.returncode == 1, proc.stderr  # a Python exception, not a signal
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the TensorRT adapter "), last
    assert f"{foreign} is built for {OTHER}, but this Python runs on {HERE}" in last


def test_libexecutorch_of_another_architecture_is_refused_by_name(tmp_path):
    # A planted executorch package whose libexecutorch.so is foreign, shadowing
    # the real one on sys.path (executorch is a namespace package, so
    # version.py comes along to keep the version check satisfied).
    real = Path(next(p for p in executorch.__path__ if (Path(p) / "version.py").is_file()))
    planted = tmp_path / "site" / "executorch"
    (planted / "lib").mkdir(parents=True)
    shutil.copy(real / "version.py", planted / "version.py")
    foreign = _retarget(real / "lib" / "libexecutorch.so", planted / "lib" / "libexecutorch.so")
    proc = _import({"PYTHONPATH": str(tmp_path / "site")}, tmp_path)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: executorch's runtime library "), last
    assert f"{foreign} is built for {OTHER}, but this Python runs on {HERE}" in last


@pytest.mark.parametrize("head, expected", [
    (b"\x7fELF\x02\x01" + bytes(12) + (183).to_bytes(2, "little"), "aarch64"),
    (b"\x7fELF\x02\x01" + bytes(12) + (62).to_bytes(2, "little"), "x86_64"),
    (b"\x7fELF\x02\x01" + bytes(12) + (999).to_bytes(2, "little"), "ELF machine 999"),
    (b"not an elf file at all", None),
    (b"\x7fELF", None),  # truncated header
])
def test_elf_architecture_reads_the_header(tmp_path, head, expected):
    f = tmp_path / "lib.so"
    f.write_bytes(head)
    assert loader._elf_architecture(f) == expected
