"""The driver-level CUDA objects (runtime/cuda/objects.py) when the garbage
collector finalizes them in any order, as it does for a reference cycle (a
failed call's traceback holding a context, its stream and its buffers).

Each case runs in a child process: a crash there (a free on a destroyed
stream) fails the test instead of the whole run. Skips without a GPU.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (CUDA memory, streams)")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ))  # this run's package (src/ on the H200)


def test_a_buffer_outliving_its_finalized_stream_is_freed_safely():
    proc = _run("""
        import gc
        from executorch_tensorrt.runtime.cuda.objects import DeviceBuffer, Stream
        for _ in range(50):
            stream = Stream(0)
            buf = DeviceBuffer(1 << 20, 0, stream)
            stream.__del__()          # the cycle's finalizer order: the stream first
            assert stream.handle is None
            del buf, stream
            gc.collect()
        print("ok")
    """)
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def test_a_cycle_of_stream_and_buffers_is_collected():
    proc = _run("""
        import gc
        from executorch_tensorrt.runtime.cuda.objects import DeviceBuffer, Stream
        class Holder:
            pass
        for _ in range(50):
            h = Holder()
            h.stream = Stream(0)
            h.buffers = [DeviceBuffer(4096, 0, h.stream) for _ in range(4)]
            h.self = h                # a cycle: finalizers run in the collector's order
            del h
            gc.collect()
        print("ok")
    """)
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
