"""A weight the ONNX exporter hands over as a non-contiguous view (a folded
transpose of a Linear weight: an LLM head is 1 GB in bf16 at a 128k
vocabulary) is hashed and written in chunks of its first axis, never copied
whole (aot/weights/content.py, Weight.byte_chunks): the same bytes as the
contiguous tensor, and, in a child process, no whole copy's memory."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from executorch_tensorrt.aot.weights.content import Weight, digest, write_hashed


def _weight(value) -> Weight:
    nbytes = value.numel() * value.element_size() if isinstance(value, torch.Tensor) \
        else value.nbytes
    return Weight("w", value, "x", tuple(value.shape), nbytes)


@pytest.mark.parametrize("make", [
    lambda: np.arange(3 * 5000, dtype=np.float32).reshape(3, 5000).T,
    lambda: torch.arange(7 * 3000, dtype=torch.float32).reshape(7, 3000).to(torch.bfloat16).T,
    lambda: torch.arange(4000 * 6).reshape(4000, 6).remainder(3).eq(0).T,
    lambda: np.arange(2 * 3 * 4, dtype=np.int8).reshape(2, 3, 4).transpose(2, 0, 1),
], ids=["numpy-f32", "torch-bf16", "torch-bool", "numpy-3d"])
def test_a_non_contiguous_weight_is_written_as_its_contiguous_bytes(make, tmp_path,
                                                                    monkeypatch):
    from executorch_tensorrt.aot.weights import content
    monkeypatch.setattr(content, "_CHUNK", 4096)  # several chunks even for these sizes
    monkeypatch.setattr(content, "_COPY_CHUNK", 4096)
    value = make()
    expected = _weight(value.contiguous() if isinstance(value, torch.Tensor)
                       else np.ascontiguousarray(value)).byte_view().tobytes()
    path, sha = write_hashed(_weight(value), str(tmp_path))
    assert open(path, "rb").read() == expected
    assert sha == digest(_weight(value)) == hashlib.sha256(expected).hexdigest()


CHILD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from proc_status import reset_peak, status
from executorch_tensorrt.aot.weights.content import Weight, write_hashed
w = torch.ones(16384, 8192, dtype=torch.bfloat16)  # 256 MiB
view = w.T
before = status("VmRSS")
reset_peak()
write_hashed(Weight("w", view, "bfloat16", tuple(view.shape), w.numel() * 2), sys.argv[1])
print(json.dumps({"growth": status("VmHWM") - before, "nbytes": w.numel() * 2}))
"""


def test_writing_a_transposed_weight_does_not_copy_it_whole(tmp_path):
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path),
                          str(Path(__file__).resolve().parents[1])],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    # The written file's pages are page cache, not this process's; a whole copy adds 1.0x.
    assert measured["growth"] < 0.25 * measured["nbytes"], measured
