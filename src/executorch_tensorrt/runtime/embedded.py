"""Entry point of the Python interpreter that the native adapter embeds in a
C++ process (native/src/embedded/embedded_python.cpp, docs/cpp.md).

A C++ application that links the adapter has no Python executors. On first
use the adapter starts an interpreter, points ``EXECUTORCH_TENSORRT_ADAPTER``
at its own file while importing this module (so ``import executorch_tensorrt``
loads *that* adapter, which the dynamic loader finds already loaded: same
handle, no second registration) and calls :func:`start`, which checks that
the adapter Python loaded is the one that is running and that the executors
are installed in it. The executors are the same ones ``import
executorch_tensorrt`` installs in a Python process.
"""
from __future__ import annotations

import os

from .adapter import loader

__all__ = ["start"]


def start(adapter_path: str) -> None:
    """Installs the Python executors into the adapter at ``adapter_path``
    (the running one). Raises with the cause if that is not possible."""
    if loader.registration_skipped():
        raise RuntimeError(
            f"{loader.SKIP_ENV} is set in this process, so executorch_tensorrt does not load "
            "its adapter and the embedded interpreter cannot install the executors; unset it")
    lib = loader.load_adapter()  # already done by the package import; idempotent
    loaded = getattr(lib, "_name", None)
    if not loaded or not os.path.exists(loaded) or not os.path.samefile(loaded, adapter_path):
        raise RuntimeError(
            f"executorch_tensorrt loaded the adapter {loaded!r}, but the running adapter is "
            f"{adapter_path!r}; the executors would be installed into the wrong library")
    from .callbacks import install

    install()  # idempotent: the package import installed them already
