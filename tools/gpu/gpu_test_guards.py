"""Makes broken copies of the package, to show that the GPU tests can fail.

    python3 tools/gpu/gpu_test_guards.py src      # writes /tmp/guard/<name>/executorch_tensorrt
    PYTHONPATH=/tmp/guard/<name>:tests python3 -m pytest tests/runtime/test_tensorrt_*_gpu.py

Each guard breaks one thing the GPU tests must catch (docs/gpu-runtime.md
lists which tests failed for each on the H200). A guard whose text is no
longer in the source stops the script: update it with the code.
"""
import shutil
import sys
from pathlib import Path

SRC = Path(sys.argv[1])  # the repository's src/
CTX = "executorch_tensorrt/runtime/tensorrt/context.py"
GUARDS = {
    "no_caller_wait": (CTX, "            check(driver().cuStreamWaitEvent(caller, self._done.handle, 0),\n"
                            "                  \"ordering the caller's stream after the engine\")\n", ""),
    "host_sync": (CTX, "            t3 = t2\n", "            t3 = t2\n            self.stream.synchronize()\n"),
    "scratch_own_stream": (CTX, "self.stream = scratch.stream if scratch is not None else Stream(device)",
                           "self.stream = Stream(device)"),
    "address_keeps_graph": (CTX, "            self._addresses[k] = address\n            self.generation += 1\n",
                            "            self._addresses[k] = address\n"),
    "set_every_call": (CTX, "        if address != self._addresses[k]:\n", "        if True:\n"),
}
for name, (rel, old, new) in GUARDS.items():
    dest = Path("/tmp/guard") / name
    shutil.copytree(SRC, dest, dirs_exist_ok=True)
    path = dest / rel
    text = path.read_text()
    assert text.count(old) == 1, (name, text.count(old))
    path.write_text(text.replace(old, new))
    print(name, dest)
