"""What `executorch-tensorrt export` exports: a built-in example, a saved
torch.export program (`.pt2`), or a `module:callable` / `file.py:callable`
factory; and the `--dynamic INPUT:DIM:MIN:MAX` dimension specs."""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .runner import UsageError


@dataclass(frozen=True)
class DynamicDim:
    """Dimension `dim` of input `input` ranges over [min, max]."""
    input: int
    dim: int
    min: int
    max: int


_DYNAMIC = re.compile(r"^(\d+):(\d+):(\d+):(\d+)$")


def parse_dynamic(text: str) -> DynamicDim:
    m = _DYNAMIC.match(text.strip())
    if not m:
        raise UsageError(f"--dynamic {text!r}: expected INPUT:DIM:MIN:MAX with non-negative "
                         "integers, e.g. 0:0:1:8 (input 0, dimension 0, from 1 to 8)")
    d = DynamicDim(*(int(g) for g in m.groups()))
    if d.min > d.max:
        raise UsageError(f"--dynamic {text!r}: MIN {d.min} is above MAX {d.max}")
    return d


def dynamic_shapes(dims: list[DynamicDim], inputs: tuple) -> tuple | None:
    """torch.export dynamic_shapes (one dict per input) for the --dynamic specs."""
    if not dims:
        return None
    from torch.export import Dim

    per_input: list[dict | None] = [None] * len(inputs)
    for d in dims:
        if d.input >= len(inputs):
            raise UsageError(f"--dynamic names input {d.input}, the model takes {len(inputs)}")
        rank = getattr(inputs[d.input], "ndim", 0)
        if d.dim >= rank:
            raise UsageError(f"--dynamic names dimension {d.dim} of input {d.input}, which has "
                             f"rank {rank}")
        size = inputs[d.input].shape[d.dim]
        if not d.min <= size <= d.max:
            raise UsageError(f"--dynamic {d.input}:{d.dim}:{d.min}:{d.max}: the example input "
                             f"has size {size} there, outside [{d.min}, {d.max}]")
        spec = per_input[d.input] if per_input[d.input] is not None else {}
        spec[d.dim] = Dim(f"input{d.input}_dim{d.dim}", min=d.min, max=d.max)
        per_input[d.input] = spec
    return tuple(per_input)


@dataclass
class ModelSource:
    """Either `model` + `inputs` (torch.export runs in export), or `program`."""
    description: str
    model: Any = None
    inputs: tuple | None = None
    dynamic_shapes: Any = None
    program: Any = None   # torch.export.ExportedProgram


def _import_callable(spec: str):
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise UsageError(f"{spec!r} is not MODULE:CALLABLE or FILE.py:CALLABLE")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UsageError(f"{path} does not exist")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
    else:
        if "" not in sys.path:
            sys.path.insert(0, "")  # like `python -m`: modules of the current directory
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            raise UsageError(f"cannot import {target!r}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"{target} has no callable {attr!r}")
    return fn


def load_source(source: str | None, example: str | None, dims: list[DynamicDim]
                ) -> ModelSource:
    import torch

    if example is not None:
        from ..examples.models import example as make_example

        model, inputs = make_example(example)
        return ModelSource(f"built-in model {example!r}", model, inputs,
                           dynamic_shapes(dims, inputs))
    assert source is not None
    if source.endswith(".pt2"):
        path = Path(source)
        if not path.is_file():
            raise UsageError(f"{path} {'is a directory' if path.is_dir() else 'does not exist'}")
        if dims:
            raise UsageError("--dynamic cannot change a saved .pt2: torch.export fixed its "
                             "shapes; export it again with dynamic_shapes")
        try:
            program = torch.export.load(str(path))
        except Exception as e:  # noqa: BLE001 - torch raises many kinds
            raise UsageError(f"{path} cannot be read by torch.export.load: {e}") from None
        return ModelSource(f"saved program {path}", program=program)
    result = _import_callable(source)()
    if isinstance(result, torch.export.ExportedProgram):
        if dims:
            raise UsageError(f"{source} returned an ExportedProgram, whose shapes torch.export "
                             "fixed already: give dynamic_shapes to torch.export instead of "
                             "--dynamic")
        return ModelSource(f"program from {source}", program=result)
    if (isinstance(result, tuple) and len(result) in (2, 3)
            and isinstance(result[0], torch.nn.Module)):
        model, inputs = result[0], result[1]
        inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
        shapes = result[2] if len(result) == 3 else dynamic_shapes(dims, inputs)
        if len(result) == 3 and dims:
            raise UsageError(f"{source} returned dynamic shapes already; drop --dynamic")
        return ModelSource(f"model from {source}", model, inputs, shapes)
    raise UsageError(f"{source} returned a {type(result).__name__}; it must return an "
                     "ExportedProgram, or (model, example_inputs[, dynamic_shapes])")
