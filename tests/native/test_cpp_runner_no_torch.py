"""A C++ process that runs a program through the adapter's embedded
interpreter never imports torch (issue #14: the runtime uses numpy and the
CUDA driver instead, so the C++ runner starts in a fraction of the time and
memory; docs/cpp.md, docs/benchmarks.md "Startup").

The probe is Python's own import log (PYTHONPROFILEIMPORTTIME=1, one stderr
line per module the embedded interpreter imports), read for a plain CNN and
for a stateful LLM decoded in the runner's decode mode (KV cache inside the
delegate), both on the onnxruntime fallback.
"""
from __future__ import annotations

import re

from helpers import FALLBACK
from test_cpp_runner import cnn, run  # noqa: F401 - fixtures
from test_cpp_runner_decode import PROMPT, decoder_pte, runner  # noqa: F401 - fixtures

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.M)


def imported_modules(*args: str) -> list[str]:
    proc = run(*args, PYTHONPROFILEIMPORTTIME="1", **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    modules = _IMPORTED.findall(proc.stderr)
    # The probe works: the embedded interpreter's imports are in the log.
    assert "executorch_tensorrt.runtime.callbacks" in modules, proc.stderr[-2000:]
    return modules


def torch_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m == "torch" or m.startswith("torch.")]


def test_running_a_cnn_imports_no_torch(runner, cnn):
    modules = imported_modules(runner, "--model_path", str(cnn))
    assert "executorch_tensorrt.runtime.onnxruntime.executor" in modules
    assert torch_modules(modules) == [], f"the embedded interpreter imported torch: " \
                                         f"{torch_modules(modules)[:5]}"


def test_decoding_with_a_kv_cache_imports_no_torch(runner, decoder_pte):
    _eager, path = decoder_pte
    modules = imported_modules(runner, "--model_path", str(path), "--decode", "4", "--prompt",
                               ",".join(map(str, PROMPT)))
    assert "executorch_tensorrt.runtime.state" in modules
    assert torch_modules(modules) == [], f"the embedded interpreter imported torch: " \
                                         f"{torch_modules(modules)[:5]}"
