"""The wheel checker's `machine` rule: an adapter checked against a
libexecutorch.so of another architecture (a cross build checked against the
host's library) is one `machine` problem, and the real pair passes it.
The foreign file is the installed adapter with its ELF e_machine rewritten."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import wheel_checks as wc  # noqa: E402

from executorch_tensorrt.runtime.adapter import loader  # noqa: E402


def test_machine_rule(tmp_path):
    installed = Path(loader.__file__).resolve().parents[2] / "lib" / loader.ADAPTER_FILENAME
    reference = wc.read_elf(wc.executorch_package_dir() / "lib" / "libexecutorch.so")
    assert wc.check_machine(wc.read_elf(installed), reference) == []
    data = bytearray(installed.read_bytes())
    data[18:20] = (183 if reference.machine != "EM_AARCH64" else 62).to_bytes(2, "little")
    foreign = tmp_path / loader.ADAPTER_FILENAME
    foreign.write_bytes(bytes(data))
    problems = wc.check_machine(wc.read_elf(foreign), reference)
    assert len(problems) == 1 and problems[0].startswith("machine: "), problems
