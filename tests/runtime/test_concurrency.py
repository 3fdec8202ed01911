"""One loaded method shared by several Python threads: every output must be the
one its own input gives (issue #9). ExecuTorch's binding holds the GIL for the
whole Method.execute; the onnxruntime fallback must not give it up mid-call,
or another thread enters the same method and overwrites its planned memory."""
from __future__ import annotations

import ctypes
import sys
import threading

import pytest
import torch

THREADS, CALLS = 8, 150


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
            torch.nn.Linear(256, 16))

    def forward(self, x):
        return self.layers(x)


@pytest.fixture(scope="module")
def mlp_program(tmp_path_factory):
    import executorch_tensorrt

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("conc") / "mlp.pte"
    executorch_tensorrt.export(Mlp().eval(), (torch.randn(4, 64),), path, progress=None)
    return path


def load_method(path):
    from executorch.runtime import Runtime

    return Runtime.get().load_program(path).load_method("forward")


def wrong_outputs_under_threads(method) -> int:
    """8 threads x CALLS calls on one method; counts outputs that differ from
    the single-thread result for the same input."""
    inputs = [torch.randn(4, 64) for _ in range(THREADS * 4)]
    expected = [method.execute([x])[0].clone() for x in inputs]
    wrong = [0] * THREADS
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        start.wait()
        for k in range(CALLS):
            i = (t * 4 + k) % len(inputs)
            if not torch.equal(method.execute([inputs[i]])[0], expected[i]):
                wrong[t] += 1

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(wrong)


def test_one_method_shared_by_threads_gives_every_caller_its_own_output(
        mlp_program, allow_fallback):
    method = load_method(mlp_program)
    assert wrong_outputs_under_threads(method) == 0


def test_a_run_that_releases_the_gil_is_what_breaks_it(mlp_program, allow_fallback,
                                                         monkeypatch):
    """The same executor with onnxruntime's Run called through CFUNCTYPE (which
    releases the GIL, as onnxruntime's Python API does) gives wrong outputs:
    the test above can fail."""
    from executorch_tensorrt.runtime import ort_capi

    api = ort_capi.OrtApi.get()
    index, result, argtypes = ort_capi._SLOTS["Run"]
    table = ctypes.cast(api.Run, ctypes.c_void_p).value
    releasing = ctypes.CFUNCTYPE(result, *argtypes)(table)
    monkeypatch.setattr(api, "Run", releasing)
    method = load_method(mlp_program)
    assert wrong_outputs_under_threads(method) > 0
