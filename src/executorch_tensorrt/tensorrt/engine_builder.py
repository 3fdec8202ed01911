"""ONNX model -> TensorRT network -> serialized engine, with an in-process cache.

The partitioner builds each candidate partition's engine as its final
support check; preprocess then finds the same engine in the cache instead
of building it twice.
"""
from __future__ import annotations

import contextlib
import functools
import contextvars
import hashlib
import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

import onnx

from ..errors import EngineBuildError
from ..aot.compile_spec import TensorRTCompileSpec
from ..aot.shapes import InputProfile
from .flavor import TensorRT, collecting_logger, load_tensorrt

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(f"[executorch_tensorrt] {message}", file=sys.stderr, flush=True)


# ExecuTorch calls preprocess itself, so the progress sink chosen by export()
# reaches it through this context variable.
_progress: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "executorch_tensorrt_progress", default=stderr_progress)


def current_progress() -> Progress | None:
    return _progress.get()


@contextlib.contextmanager
def progress_to(progress: Progress | None):
    token = _progress.set(progress)
    try:
        yield
    finally:
        _progress.reset(token)


@dataclass(frozen=True)
class BuiltEngine:
    engine: bytes
    flavor: str
    version: str
    compute_capabilities: tuple[str, ...] | None
    build_seconds: float


class ParseFailure(EngineBuildError):
    """TensorRT's ONNX parser rejected nodes; `node_indices` says which."""

    def __init__(self, message: str, node_indices: list[int]):
        super().__init__(message)
        self.node_indices = node_indices


_cache: dict[str, BuiltEngine] = {}
_cache_lock = threading.Lock()


def parse_errors(parser) -> tuple[str, list[int]]:
    lines, nodes = [], []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        lines.append(f"node {err.node()} ({err.node_operator() or '?'} {err.node_name() or ''}): "
                     f"{err.code()}: {err.desc()}")
        if err.node() >= 0:
            nodes.append(int(err.node()))
    return "; ".join(lines), nodes


def _new_parser(trt: TensorRT):
    """A builder, an empty network and an ONNX parser into it, sharing one logger."""
    logger = collecting_logger(trt)
    builder = trt.module.Builder(logger)
    network = builder.create_network(0)
    return builder, network, trt.module.OnnxParser(network, logger), logger


def parse_network(trt: TensorRT, onnx_bytes: bytes):
    """Parses an ONNX model into a new network. Raises ParseFailure."""
    builder, network, parser, logger = _new_parser(trt)
    if not parser.parse(onnx_bytes):
        message, nodes = parse_errors(parser)
        raise ParseFailure(f"TensorRT's ONNX parser rejected the model: {message}", nodes)
    return builder, network, parser, logger


def unsupported_nodes(trt: TensorRT, onnx_bytes: bytes) -> set[int]:
    """ONNX node indices that TensorRT's parser places in no supported subgraph.

    `is_subgraph_supported(i) == False` means "not checked", so only nodes
    outside every subgraph count as unsupported here; full parses of each
    partition are the final check.
    """
    return set(_unsupported_nodes(trt, onnx_bytes))


@functools.lru_cache(maxsize=256)
def _unsupported_nodes(trt: TensorRT, onnx_bytes: bytes) -> frozenset[int]:
    _builder, _network, parser, _logger = _new_parser(trt)  # all kept alive until done
    parser.supports_model_v2(onnx_bytes)
    covered: set[int] = set()
    for i in range(parser.num_subgraphs):
        covered.update(int(n) for n in parser.get_subgraph_nodes(i))
    count = len(onnx.load_model_from_string(onnx_bytes).graph.node)
    return frozenset(set(range(count)) - covered)


def _add_profile(builder, network, config, profiles: list[InputProfile] | None) -> None:
    if not profiles or not any(p.is_dynamic for p in profiles):
        return
    if len(profiles) != network.num_inputs:
        raise EngineBuildError(f"{len(profiles)} input profiles for a network with "
                               f"{network.num_inputs} inputs")
    profile = builder.create_optimization_profile()
    for i, p in enumerate(profiles):
        profile.set_shape(network.get_input(i).name, p.min, p.opt, p.max)
    config.add_optimization_profile(profile)


def _configure(trt: TensorRT, builder, spec: TensorRTCompileSpec):
    config = builder.create_builder_config()
    m = trt.module
    if spec.workspace_bytes is not None:
        config.set_memory_pool_limit(m.MemoryPoolType.WORKSPACE, spec.workspace_bytes)
    if trt.is_rtx and spec.compute_capabilities:
        members = m.ComputeCapability.__members__
        config.num_compute_capabilities = len(spec.compute_capabilities)
        for i, cc in enumerate(spec.compute_capabilities):
            if cc not in members:
                supported = [k for k in members if k.startswith("SM")]
                raise EngineBuildError(
                    f"TensorRT-RTX {trt.version} cannot build for {cc}; it supports {supported}")
            config.set_compute_capability(members[cc], i)
    elif spec.compute_capabilities and not trt.is_rtx:
        raise EngineBuildError(
            "compute_capabilities applies to TensorRT-RTX only; standard TensorRT builds for "
            "the GPU it runs on. Remove the option or install tensorrt-rtx-cu13.")
    return config


def _key(trt: TensorRT, onnx_bytes: bytes, spec: TensorRTCompileSpec, profiles) -> str:
    h = hashlib.sha256(onnx_bytes)
    h.update(json.dumps([trt.flavor, trt.version, spec.as_dict(),
                         [p.as_dict("") for p in profiles or []]], sort_keys=True).encode())
    return h.hexdigest()


def build_engine(onnx_bytes: bytes, spec: TensorRTCompileSpec, *, label: str = "partition",
                 profiles: list[InputProfile] | None = None,
                 progress: Progress | None = stderr_progress,
                 trt: TensorRT | None = None) -> BuiltEngine:
    """Builds (or returns the cached) engine for an ONNX model. `profiles` gives
    min/opt/max shapes per network input when any is dynamic."""
    trt = trt or load_tensorrt()
    key = _key(trt, onnx_bytes, spec, profiles)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    builder, network, _parser, logger = parse_network(trt, onnx_bytes)
    config = _configure(trt, builder, spec)
    _add_profile(builder, network, config, profiles)
    if progress:
        progress(f"building TensorRT engine for {label} ({network.num_layers} layers, "
                 f"{trt.flavor} {trt.version})...")
    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if serialized is None or serialized.nbytes == 0:
        log = "; ".join(logger.messages[-5:]) or "no message"
        raise EngineBuildError(
            f"TensorRT ({trt.flavor} {trt.version}) could not build an engine for {label}: "
            f"{log}")
    if progress:
        progress(f"built {label} in {seconds:.2f} s ({serialized.nbytes} bytes)")
    built = BuiltEngine(bytes(serialized), trt.flavor, trt.version,
                        spec.compute_capabilities, seconds)
    with _cache_lock:
        _cache[key] = built
    return built
