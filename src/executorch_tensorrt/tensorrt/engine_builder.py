"""ONNX model + BuildOptions -> TensorRT network -> serialized engine, with an
in-process cache.

The partitioner builds each candidate partition's engine as its final
support check; preprocess then finds the same engine in the cache instead
of building it twice (when it ships an engine at all). A graph without
weights is built with them supplied by address (`initializers`); the cache
key then includes `weights_id`, which names the weights' contents.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import EngineBuildError
from .flavor import TensorRT, load_tensorrt
from .onnx_parser import Initializer, parse_network
from .options import (
    MAX_OPTIMIZATION_PROFILES, BuildOptions, InputProfile, ProfileSet, profile_sets)

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
    # Optimization profiles the builder config held (0: a static network needs none).
    optimization_profiles: int = 0
    # TensorRT's activation (scratch) memory per optimization profile, as its
    # builder reported it (engine order; empty where it reported none).
    activation_bytes: tuple[int, ...] = ()


_cache: dict[str, BuiltEngine] = {}
_cache_lock = threading.Lock()


def _add_profiles(builder, network, config, sets: list[ProfileSet]) -> None:
    """One TensorRT optimization profile per set, in order (profile k of the
    engine is sets[k]); none when no input is dynamic."""
    if not sets or not any(p.is_dynamic for s in sets for p in _values(s)):
        return
    if len(sets) > MAX_OPTIMIZATION_PROFILES:
        raise EngineBuildError(f"{len(sets)} optimization profiles asked for; at most "
                               f"{MAX_OPTIMIZATION_PROFILES} are supported")
    names = [network.get_input(i).name for i in range(network.num_inputs)]
    for k, profiles in enumerate(sets):
        if isinstance(profiles, dict):
            missing = [n for n in names if n not in profiles]
            if missing:
                raise EngineBuildError(f"optimization profile {k} gives no shapes for network "
                                       f"inputs {missing} (it names {sorted(profiles)})")
            profiles = [profiles[n] for n in names]
        if len(profiles) != network.num_inputs:
            raise EngineBuildError(f"optimization profile {k} has {len(profiles)} input "
                                   f"profiles for a network with {network.num_inputs} inputs")
        profile = builder.create_optimization_profile()
        for name, p in zip(names, profiles):
            profile.set_shape(name, p.min, p.opt, p.max)
        if config.add_optimization_profile(profile) < 0:
            shapes = [p.as_dict(n) for n, p in zip(names, profiles)]
            raise EngineBuildError(f"TensorRT refused optimization profile {k}: {shapes}")


def _values(profiles: ProfileSet) -> list[InputProfile]:
    return list(profiles.values()) if isinstance(profiles, dict) else list(profiles)


def _configure(trt: TensorRT, builder, options: BuildOptions):
    config = builder.create_builder_config()
    m = trt.module
    if options.workspace_bytes is not None:
        config.set_memory_pool_limit(m.MemoryPoolType.WORKSPACE, options.workspace_bytes)
    if trt.is_rtx and options.compute_capabilities:
        members = m.ComputeCapability.__members__
        config.num_compute_capabilities = len(options.compute_capabilities)
        for i, cc in enumerate(options.compute_capabilities):
            if cc not in members:
                supported = [k for k in members if k.startswith("SM")]
                raise EngineBuildError(
                    f"TensorRT-RTX {trt.version} cannot build for {cc}; it supports {supported}")
            config.set_compute_capability(members[cc], i)
    elif options.compute_capabilities and not trt.is_rtx:
        raise EngineBuildError(
            "compute_capabilities applies to TensorRT-RTX only; standard TensorRT builds for "
            "the GPU it runs on. Remove the option or install tensorrt-rtx-cu13.")
    return config


def _key(trt: TensorRT, onnx_bytes: bytes, options: BuildOptions,
         sets: list[ProfileSet], weights_id: str = "", stripped: bool = False) -> str:
    h = hashlib.sha256(onnx_bytes)
    shapes = [[s[n].as_dict(n) for n in sorted(s)] if isinstance(s, dict)
              else [p.as_dict("") for p in s] for s in sets]
    h.update(json.dumps([trt.flavor, trt.version, options.as_dict(), shapes, weights_id]
                        + (["stripped"] if stripped else []),
                        sort_keys=True).encode())
    return h.hexdigest()


def _strip_weights(trt: TensorRT, config) -> None:
    """A weight-stripped plan, refitted at load from the same weights
    (REFIT_IDENTICAL lets the builder optimize for these exact values). Needs a
    CUDA device: TensorRT-RTX fails in Myelin without one."""
    flags = trt.module.BuilderFlag
    config.set_flag(flags.STRIP_PLAN)
    config.set_flag(flags.REFIT_IDENTICAL)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 100_000 else f"{nbytes} bytes"


def build_engine(onnx_bytes: bytes, options: BuildOptions, *, label: str = "partition",
                 profiles: Sequence[InputProfile] | Sequence[ProfileSet] | None = None,
                 progress: Progress | None = stderr_progress,
                 trt: TensorRT | None = None,
                 initializers: Sequence[Initializer] = (),
                 weights_id: str | None = None, stripped: bool = False,
                 keep_engine: bool = True) -> BuiltEngine:
    """Builds (or returns the cached) engine for an ONNX model. `profiles` gives
    min/opt/max shapes per network input when any is dynamic: one list of
    InputProfile (one optimization profile), or a list of profiles (each a
    list in network input order, or a dict by input name), in engine order. `initializers`:
    weights read from caller memory (onnx_parser.parse_network), valid until
    this returns; `weights_id` names their content (e.g. their digests) for
    the in-process cache, which is skipped when initializers come without it.
    `stripped` builds a weight-stripped refittable plan. `keep_engine=False`
    (a build that only checks the model) returns no plan bytes and caches
    nothing, so the plan's memory is freed at once."""
    trt = trt or load_tensorrt()
    cacheable = keep_engine and (not initializers or weights_id is not None)
    sets = profile_sets(profiles)
    key = _key(trt, onnx_bytes, options, sets, weights_id or "", stripped)
    with _cache_lock:
        hit = _cache.get(key) if cacheable else None
    if hit is not None:
        return hit
    builder, network, _parser, logger = parse_network(trt, onnx_bytes, initializers)
    config = _configure(trt, builder, options)
    _add_profiles(builder, network, config, sets)
    if stripped:
        _strip_weights(trt, config)
    if progress:
        weights = sum(n for _, _, n in initializers)
        progress(f"building TensorRT engine for {label} ({network.num_layers} layers"
                 + (f", {_mb(weights)} of weights" if weights else "")
                 + (f", {len(sets)} optimization profiles" if len(sets) > 1 else "")
                 + f", {trt.flavor} {trt.version}{', weight-stripped' if stripped else ''})...")
    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if serialized is None or serialized.nbytes == 0:
        log = "; ".join(logger.messages[-5:]) or "no message"
        raise EngineBuildError(
            f"TensorRT ({trt.flavor} {trt.version}) could not build an engine for {label}: "
            f"{log}")
    if progress:
        progress(f"built {label} in {seconds:.2f} s ({_mb(serialized.nbytes)})")
    activation = tuple(n for n in logger.activation_bytes if n >= 0)
    if not keep_engine:
        return BuiltEngine(b"", trt.flavor, trt.version, options.compute_capabilities, seconds,
                           config.num_optimization_profiles, activation)
    built = BuiltEngine(bytes(serialized), trt.flavor, trt.version,
                        options.compute_capabilities, seconds, config.num_optimization_profiles,
                        activation)
    del serialized
    if cacheable:
        with _cache_lock:
            _cache[key] = built
    return built
