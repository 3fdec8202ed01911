"""Which GPU a TensorRT partition runs on, chosen at load (docs/gpu-runtime.md).

The blob records the device it was exported for (`device_id`, default 0);
EXECUTORCH_TENSORRT_DEVICE overrides it at load, for every TensorRT partition
loaded after it is set ("1" or "cuda:1"). An engine built for another GPU
model than the chosen one goes through engine portability as usual.
"""
from __future__ import annotations

import os

from ...errors import ArgumentError, EngineUnavailable
from .objects import device_count
from .probe import cuda_unavailable_reason

__all__ = ["DEVICE_ENV", "chosen_device", "parse_device"]

DEVICE_ENV = "EXECUTORCH_TENSORRT_DEVICE"


def parse_device(text: str, source: str) -> int:
    """A CUDA device index from "1" or "cuda:1"; `source` names where it came from."""
    value = text.strip().lower().removeprefix("cuda:")
    if not value.isdigit():
        raise ArgumentError(f"{source} is {text!r}; expected a CUDA device index such as 0, "
                            "1 or cuda:1")
    return int(value)


def chosen_device(meta, option: str | None = None) -> int:
    """The CUDA device index for a partition: the load-time option, else the
    environment, else the blob's device_id (`meta`: a BlobMetadata, or its
    JSON form); checked against the GPUs present."""
    if option:
        source = f"the load-time backend option device={option!r}"
        index = parse_device(option, "the load-time backend option \"device\"")
    elif os.environ.get(DEVICE_ENV, "").strip():
        source = f"{DEVICE_ENV}={os.environ[DEVICE_ENV]}"
        index = parse_device(os.environ[DEVICE_ENV], DEVICE_ENV)
    else:
        device_id = meta.get("device_id") if isinstance(meta, dict) else meta.device_id
        index = device_id if device_id is not None else 0
        source = f"the program's device_id {index} (set at export)"
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise EngineUnavailable(reason)
    count = device_count()
    if index >= count:
        # A device the caller named is a mistake to report, not a reason to
        # fall back to the CPU; the program's own device_id may be either.
        error = EngineUnavailable if source.startswith("the program") else ArgumentError
        raise error(f"{source} asks for CUDA device {index}, but only {count} device(s) "
                    f"exist (0..{count - 1}); set {DEVICE_ENV} to one of them")
    return index
