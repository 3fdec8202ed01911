"""Fixtures shared by the LLM tests."""
from __future__ import annotations

import fcntl

import pytest

from runner_helpers import CONFIGS, TINY_MAX_CONTEXT, TINY_MAX_SEQ


@pytest.fixture(scope="session")
def tiny_llama_pte(tmp_path_factory, worker_id):
    """The tiny Llama of runner_helpers written once by `llm.export` for the
    whole run (TINY_MAX_SEQ tokens per call, TINY_MAX_CONTEXT positions).
    Under pytest-xdist the workers share one file: the first writes it under
    a lock, the others read it. Tests must not modify it."""
    from executorch_tensorrt import llm

    def export(path):
        llm.export(CONFIGS["llama"], max_seq_len=TINY_MAX_SEQ, max_context_len=TINY_MAX_CONTEXT,
                   output=path, progress=None)
        return path

    if worker_id == "master":
        return export(tmp_path_factory.mktemp("tiny-llama") / "llama.pte")
    shared = tmp_path_factory.getbasetemp().parent / "tiny-llama"
    shared.mkdir(exist_ok=True)
    path = shared / "llama.pte"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():   # llm.export publishes the file whole or not at all
            export(path)
    return path
