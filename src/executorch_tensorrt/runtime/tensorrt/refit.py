"""Refits a weight-stripped engine ("engine": "stripped") from named data.

GPU-only (a stripped plan is deserialized, then refitted, on the device), so
this stays thin: TensorRT's OnnxParserRefitter maps the ONNX initializer
names to the engine's weights (folded and transposed ones included, which
Refitter.set_named_weights by hand would miss), reading each weight from the
named data by address. The order is TensorRT's: Refitter(engine) ->
OnnxParserRefitter.load_model_proto(weightless ONNX) -> load_initializer per
weight -> refit_model_proto -> Refitter.refit_cuda_engine, then nothing may
be missing. The weights' memory (mapped named data) outlives both refitters.
"""
from __future__ import annotations

from typing import Sequence

from ...errors import EngineUnavailable, InvalidProgramError
from ..named_data import WeightBuffer

__all__ = ["refit_engine"]


def _errors(parser_refitter) -> str:
    lines = []
    for i in range(int(getattr(parser_refitter, "num_errors", 0) or 0)):
        err = parser_refitter.get_error(i)
        lines.append(f"{err.code()}: {err.desc()}")
    return "; ".join(lines) or "no message"


def refit_engine(trt, engine, onnx_bytes: bytes, weights: Sequence[WeightBuffer], logger) -> None:
    """Refits `engine` in place with `weights`; raises with the cause if
    TensorRT refuses a weight or leaves any weight unset."""
    m = trt.module
    if not getattr(engine, "refittable", True):
        raise InvalidProgramError("the blob says its engine is weight-stripped (\"engine\": "
                                  "\"stripped\"), but the engine is not refittable; re-export "
                                  "the program")
    refitter = m.Refitter(engine, logger)
    parser_refitter = m.OnnxParserRefitter(refitter, logger)
    if not parser_refitter.load_model_proto(onnx_bytes):
        raise EngineUnavailable(f"TensorRT's ONNX refitter could not load the partition's "
                                f"weightless ONNX model: {_errors(parser_refitter)}")
    for w in weights:
        if not parser_refitter.load_initializer(w.name, w.address, w.nbytes):
            raise InvalidProgramError(
                f"TensorRT's ONNX refitter refused weight {w.name!r} ({w.nbytes} bytes, named "
                f"data key {w.key!r}): {_errors(parser_refitter)}")
    if not parser_refitter.refit_model_proto():
        raise EngineUnavailable(f"TensorRT could not refit the weight-stripped engine from the "
                                f"named data: {_errors(parser_refitter)}")
    missing = list(refitter.get_missing_weights())
    if missing:
        raise InvalidProgramError(
            f"the named data leaves engine weights {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''} unset: the blob's ONNX model and its "
            "weight-stripped engine do not match; re-export the program")
    if not refitter.refit_cuda_engine():
        raise EngineUnavailable("TensorRT's refit_cuda_engine failed for the weight-stripped "
                                "engine; its log says why")
