"""Edge-node tags that survive the ONNX exporter, and a quiet exporter.

Both the ONNX export (export.py) and the translatable check (translatable.py)
tag edge nodes before handing a program to the exporter and read the tags
back afterwards; they live here so that neither imports the other for them.
A tag rides in `meta["stack_trace"]`: the exporter copies each FX node's
stack trace into the ONNX node's metadata and decompositions keep it, so it
survives re-tracing, where FX node names do not.
"""
from __future__ import annotations

import contextlib
import io
import logging
import warnings

import torch

from ..program_copy import copy_program

TAG_PREFIX = "etrt-node:"


def tag_edge_nodes(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A deep copy of `ep` whose call_function nodes carry their name as a tag."""
    tagged = copy_program(ep)
    for node in tagged.graph.nodes:
        if node.op == "call_function":
            node.meta["stack_trace"] = TAG_PREFIX + node.name
    return tagged


def edge_name_from_trace(trace: str | None) -> str | None:
    if trace and trace.startswith(TAG_PREFIX):
        return trace[len(TAG_PREFIX):]
    return None


@contextlib.contextmanager
def quiet():
    """Silences the exporter's progress prints and warnings."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "torch.export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
