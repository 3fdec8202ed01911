"""ExecuTorch's own lowering errors, raised as ExportErrors that keep
ExecuTorch's words and add what to do.

Only errors raised inside ExecuTorch's or torch's code are wrapped: ours
already say what failed and why, and callers catch their types."""
from __future__ import annotations

import re
import traceback
from contextlib import contextmanager
from typing import Iterator

from ...errors import ExportError

_OURS = "/executorch_tensorrt/"
_THEIRS = "/executorch/"
# What a step of ExecuTorch's lowering does, in the words of its remedy.
_STAGES = {
    "to_edge_transform_and_lower": "converting the program to ExecuTorch's edge dialect and "
                                   "handing partitions to the delegates",
    "to_executorch": "turning the edge program into an ExecuTorch program (out variants, "
                     "memory planning)",
}
_OP = re.compile(r"\b(?:[a-z_][a-z0-9_]*::[A-Za-z0-9_.]+|aten\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)")


def raised_by_executorch(error: BaseException) -> bool:
    """`error` came from ExecuTorch's code (or what it called), not from our
    partitioner or preprocess that ExecuTorch called back."""
    files = [f.filename.replace("\\", "/") for f in traceback.extract_tb(error.__traceback__)]
    first = next((i for i, f in enumerate(files) if _THEIRS in f), None)
    return first is not None and not any(_OURS in f for f in files[first:])


def lowering_error(stage: str, error: BaseException) -> ExportError:
    text = f"{type(error).__name__}: {error}".strip()
    ops = sorted(set(_OP.findall(str(error))))
    named = (f" It names {', '.join(ops)}: keep {'that op' if len(ops) == 1 else 'those ops'} "
             "on TensorRT (the partition report says why TensorRT's parser refused it), give "
             "export a partitioner after TensorRT that takes it (partitioners=[...]), or "
             "change the model to avoid it." if ops else
             " Look for the op or node it names in the model, or in the partition report "
             "(export_program(...).partitioner.reports); exclude_ops=[...] keeps an op off "
             "TensorRT if a TensorRT partition is what ExecuTorch refused.")
    return ExportError(
        f"ExecuTorch's {stage} failed while {_STAGES.get(stage, stage)}. Nothing was written. "
        f"ExecuTorch said: {text}.{named} If the model exports without executorch-tensorrt "
        "(ExecuTorch's own to_edge_transform_and_lower and to_executorch), this is a bug of "
        "executorch-tensorrt: please report it with this message.")


@contextmanager
def executorch_step(stage: str) -> Iterator[None]:
    """Errors ExecuTorch raises inside the block come out as ExportErrors."""
    try:
        yield
    except ExportError:
        raise
    except Exception as e:  # noqa: BLE001 - ExecuTorch's passes raise anything
        if not raised_by_executorch(e):
            raise
        raise lowering_error(stage, e) from e
