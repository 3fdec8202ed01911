"""Finds the installed TensorRT: standard `tensorrt` first, else TensorRT-RTX."""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType

from ..errors import TensorRTNotInstalledError

# Import names in order of preference, with the flavour recorded in blobs.
FLAVORS = (("tensorrt", "tensorrt"), ("tensorrt_rtx", "tensorrt_rtx"))


@dataclass(frozen=True)
class TensorRT:
    module: ModuleType
    flavor: str  # "tensorrt" or "tensorrt_rtx"
    version: str

    @property
    def is_rtx(self) -> bool:
        return self.flavor == "tensorrt_rtx"


def _try(name: str, failures: list[str]) -> ModuleType | None:
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        failures.append(f"{name}: {e}")
        return None
    if not hasattr(module, "Builder"):
        # The PyPI `tensorrt` stub packages import but carry no builder.
        failures.append(f"{name}: imports but has no Builder (a stub package?)")
        return None
    return module


@functools.lru_cache(maxsize=None)
def load_tensorrt(flavor: str | None = None) -> TensorRT:
    """Returns the preferred TensorRT, or the given flavour."""
    failures: list[str] = []
    for name, fl in FLAVORS:
        if flavor is not None and fl != flavor:
            continue
        module = _try(name, failures)
        if module is not None:
            return TensorRT(module, fl, str(module.__version__))
    raise TensorRTNotInstalledError(
        f"TensorRT cannot be imported ({'; '.join(failures)}). "
        "Install TensorRT-RTX with `pip install executorch-tensorrt[rtx]` "
        "(tensorrt-rtx-cu13), or NVIDIA's standard `tensorrt` wheel."
    )


#: How TensorRT's builder reports each profile's activation memory (INFO).
ACTIVATION_MEMORY_LINE = "Total Activation Memory:"


def _bytes_in(message: str) -> int:
    """The byte count of "Total Activation Memory: 10289152 bytes"."""
    words = message[len(ACTIVATION_MEMORY_LINE):].split()
    return int(words[0]) if words and words[0].isdigit() else -1


def collecting_logger(trt: TensorRT):
    """A logger that keeps TensorRT's messages instead of printing them: the
    partitioner asks about many subgraphs whose rejection is expected."""
    base = trt.module.ILogger

    class CollectingLogger(base):
        def __init__(self):
            base.__init__(self)
            self.messages: list[str] = []
            # Weight copies TensorRT reads during the parse and the build
            # (onnx_parser._distinct_addresses): they live as long as this.
            self.kept_buffers: list[bytearray] = []
            # The builder's activation (scratch) memory per optimization
            # profile, in profile order: a serialized plan does not carry it
            # in a form readable without a GPU (deserializing needs CUDA).
            self.activation_bytes: list[int] = []

        def log(self, severity, msg):
            if severity <= trt.module.ILogger.Severity.WARNING:
                self.messages.append(str(msg))
            elif str(msg).startswith(ACTIVATION_MEMORY_LINE):
                self.activation_bytes.append(_bytes_in(str(msg)))

    return CollectingLogger()
