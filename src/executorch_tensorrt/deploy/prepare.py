"""Engines before the first call.

A program exported without a GPU carries no engine (`engine none`), or one
for other GPUs or another TensorRT: its first load builds the engine from the
embedded ONNX (tens of seconds for real models) and caches it. `prepare` pays
that cost ahead of time, on the target machine: it runs, per TensorRT
partition, the same rebuild the executor's load would run
(runtime/tensorrt/portability.py `rebuild_for`), for the same key, into the
engine cache load reads (`EXECUTORCH_TENSORRT_CACHE_DIR`, else
~/.cache/executorch_tensorrt). The entry records the program digest, target
capability, TensorRT flavour and version and the build time; a load that
finds an entry for other facts refuses it with the reason and rebuilds.

`first_load` answers, without building, what the first load of each
partition will do: run the program's own engine, use a prepared entry, or
build (and why). It reads only metadata and the embedded ONNX, no weights.

This reads the .pte with ExecuTorch's deserializer (program/info.py), so it
sits above the runtime, which never imports exir.
"""
from __future__ import annotations

import mmap
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..blob import Blob, BlobError, read_blob
from ..errors import (EngineUnavailable, InvalidProgramError, NamedDataError, OutputWriteError,
                      TensorRTNotInstalledError)
from ..program.info import read_pte
from ..program.named_data import DataFileError, read_ptd_segments
from ..runtime.cuda.device import chosen_device
from ..runtime.cuda.objects import device_capability
from ..runtime.cuda.probe import cuda_unavailable_reason
from ..runtime.named_data import InMemoryNamedData, blob_weights
from ..runtime.tensorrt.engine_cache import EngineCache, EntryFacts
from ..runtime.tensorrt.portability import (
    RebuildImpossible, built_here, cache_dir, cache_key, embedded_onnx, program_key, rebuild_for)
from ..tensorrt.engine_builder import Progress, stderr_progress
from ..tensorrt.flavor import TensorRT, load_tensorrt

_CAPABILITY = re.compile(r"SM[0-9]{2,4}")


@dataclass(frozen=True)
class PreparedPartition:
    """What `prepare` did for one TensorRT partition."""

    method: str
    index: int            # the delegate's index in the method
    capability: str
    source: str           # "blob" (ships a usable engine), "cache" (already prepared), "built"
    seconds: float        # this partition's time in prepare (lookup or build)
    build_seconds: float | None  # the recorded build time (this build or the entry's)
    rejected: str | None = None  # an entry that was refused and rebuilt, and why


@dataclass(frozen=True)
class PartitionLoad:
    """What the first load of one TensorRT partition will do."""

    method: str
    index: int
    builds: bool          # True: the first load builds an engine (tens of seconds)
    reason: str
    build_seconds: float | None  # measured at export (blob) or at prepare (cache entry)


def _tensorrt_for(blob: Blob) -> TensorRT:
    """The TensorRT the executor would load for this blob (executor.py's rule)."""
    try:
        return load_tensorrt(blob.meta.build.trt_flavor)
    except TensorRTNotInstalledError:
        return load_tensorrt()


def checked_target(capability: str) -> str:
    """`capability` as "SM89", or ValueError saying the form."""
    target = capability.strip().upper()
    if not _CAPABILITY.fullmatch(target):
        raise ValueError(f"target {capability!r} is not a compute capability such as SM89 "
                            "(SM followed by the major and minor digits)")
    return target


def _target(blob: Blob, capability: str | None) -> str:
    """The capability asked for, else the GPU the executor would use."""
    if capability:
        return checked_target(capability)
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise EngineUnavailable(
            f"no GPU here to prepare for ({reason}); name the target GPU's compute "
            "capability: prepare(..., capability='SM89') or --target SM89")
    major, minor = device_capability(chosen_device(blob.meta))
    return f"SM{major}{minor}"


def _partitions(pte_file) -> Iterator[tuple[str, int, Blob]]:
    program = pte_file.program
    if program.execution_plan is None or program.backend_delegate_data is None:
        raise InvalidProgramError("the program's method or delegate table is missing (a "
                                  "damaged .pte): export it again")
    for plan in program.execution_plan:
        for i, delegate in enumerate(plan.delegates or ()):
            if delegate.id != "TensorRTBackend":
                continue
            index = delegate.processed.index
            if not 0 <= index < len(program.backend_delegate_data):
                raise InvalidProgramError(f"method {plan.name} delegate [{i}] names delegate "
                                          f"data {index} of {len(program.backend_delegate_data)}")
            try:
                yield plan.name, i, read_blob(bytes(program.backend_delegate_data[index].data))
            except BlobError as e:
                raise InvalidProgramError(f"method {plan.name} delegate [{i}]: {e}") from None


def program_named_data(pte_file, ptd: str | Path | None) -> InMemoryNamedData | None:
    """The program's named data (`pte_file`: program/info.read_pte's): the
    .pte's own entries and the .ptd's, mapped read-only (a weights file is
    used where it lies, never copied; the views keep the mapping alive)."""
    entries: dict[str, object] = {}
    named = getattr(pte_file, "named_data", None)
    if named is not None:
        for key, entry in named.pte_data.items():
            entries[key] = named.buffers[entry.buffer_index]
    if ptd is not None:
        try:
            segments = read_ptd_segments(ptd)
        except DataFileError as e:
            raise InvalidProgramError(str(e)) from None
        with open(ptd, "rb") as f:
            view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        for key, (offset, size) in segments.items():
            entries[key] = view[offset:offset + size]  # bounds checked by read_ptd_segments
    return InMemoryNamedData(entries) if entries else None  # None: "pass the .ptd"


def weights_found(pte: str | Path, ptd: str | Path | None) -> list[str]:
    """Per TensorRT partition, whether its weights are in the program's named
    data and `ptd` (sizes checked), as a line each: what a load would refuse."""
    pte_file = read_pte(pte)
    named = program_named_data(pte_file, ptd)
    lines = []
    for method, index, blob in _partitions(pte_file):
        if not blob.meta.weights:
            lines.append(f"{method}[{index}]: no named-data weights (inline)")
            continue
        try:
            blob_weights(blob, named)
            lines.append(f"{method}[{index}]: {len(blob.meta.weights)} weights found")
        except NamedDataError as e:
            lines.append(f"{method}[{index}]: {e}")
    return lines


def prepare(pte: str | Path, ptd: str | Path | None = None, *,
            cache: str | Path | None = None, capability: str | None = None,
            progress: Progress | None = stderr_progress) -> list[PreparedPartition]:
    """Builds every engine the first load of `pte` would build, for `capability`
    ("SM89"; default: the local GPU), into the engine cache `cache` (default:
    the one load reads). A load with EXECUTORCH_TENSORRT_CACHE_DIR=`cache`
    (or the default cache) then finds them and builds nothing."""
    say: Callable[[str], None] = progress or (lambda _m: None)
    pte_file = read_pte(pte)
    named = program_named_data(pte_file, ptd)
    store = EngineCache(cache) if cache is not None else EngineCache(cache_dir())
    done = []
    partitions = list(_partitions(pte_file))
    for n, (method, index, blob) in enumerate(partitions, 1):
        target = _target(blob, capability)
        trt = _tensorrt_for(blob)
        where = f"[{n}/{len(partitions)}] {method}[{index}]"
        start = time.perf_counter()
        if blob.engine_kind != "none" and built_here(blob, trt, target):
            say(f"{where}: ships a {blob.engine_kind} engine for {target} "
                f"({trt.flavor} {trt.version}); nothing to build")
            done.append(PreparedPartition(method, index, target, "blob", 0.0,
                                          blob.meta.build.build_seconds))
            continue
        say(f"{where}: looking up or building its engine for {target} "
            f"({trt.flavor} {trt.version}) in {store.directory}")
        try:
            weights = blob_weights(blob, named)
        except NamedDataError as e:
            raise NamedDataError(f"{where}: {e}") from None
        try:
            fetched = rebuild_for(blob, trt, target, weights).fetch(store)
        except RebuildImpossible as e:
            raise EngineUnavailable(f"{where}: cannot prepare the engine for {target}: {e}") \
                from None
        if fetched.not_stored:
            raise OutputWriteError(f"{where}: the engine for {target} was built but not "
                                   f"prepared: {fetched.not_stored}", path=str(store.directory))
        seconds = time.perf_counter() - start
        facts = fetched.facts
        say(f"{where}: {'built' if fetched.built else 'already prepared'} "
            f"({seconds:.2f} s here"
            + (f"; build {facts.build_seconds:.2f} s" if facts and facts.build_seconds else "")
            + ")")
        done.append(PreparedPartition(method, index, target,
                                      "built" if fetched.built else "cache", seconds,
                                      facts.build_seconds if facts else None, fetched.rejected))
    return done


def first_load(pte: str | Path, *, cache: str | Path | None = None,
               capability: str | None = None) -> list[PartitionLoad]:
    """Per TensorRT partition, whether the first load on a GPU of `capability`
    (default: the local GPU; none here: what the metadata alone says) will
    build, and why; reads the cache, builds nothing."""
    store = EngineCache(cache) if cache is not None else EngineCache(cache_dir())
    out = []
    for method, index, blob in _partitions(read_pte(pte)):
        target = (checked_target(capability) if capability
                  else None if cuda_unavailable_reason() else _target(blob, None))
        out.append(_first_load(method, index, blob, target, store))
    return out


def _first_load(method: str, index: int, blob: Blob, target: str | None,
                store: EngineCache) -> PartitionLoad:
    facts = blob.meta.build
    shipped = ("ships no engine" if blob.engine_kind == "none" else
               f"ships a {blob.engine_kind} engine ({facts.trt_flavor} {facts.trt_version}, "
               f"{_capabilities(facts.compute_capabilities)})")
    if target is None:
        return PartitionLoad(method, index, blob.engine_kind == "none",
                             f"{shipped}; no GPU here and no target given: pass --target SM.. "
                             "to check it against a GPU and the engine cache",
                             facts.build_seconds)
    try:
        trt = _tensorrt_for(blob)
    except TensorRTNotInstalledError as e:
        return PartitionLoad(method, index, blob.engine_kind == "none",
                             f"{shipped}; no TensorRT here to check it against {target}: {e}",
                             facts.build_seconds)
    if blob.engine_kind != "none" and built_here(blob, trt, target):
        return PartitionLoad(method, index, False, f"{shipped}, which runs on {target}",
                             facts.build_seconds)
    if blob.engine_kind != "none":
        shipped += f", not for {target} with {trt.flavor} {trt.version}"
    try:
        program, _ = program_key(blob, embedded_onnx(blob),
                                 [(w.name, w.key, w.nbytes) for w in blob.meta.weights or ()])
    except RebuildImpossible as e:
        return PartitionLoad(method, index, True, f"{shipped}, and it cannot be built: {e}",
                             None)
    found, refused = store.peek(cache_key(program, trt, target),
                                EntryFacts(program, target, trt.flavor, trt.version))
    if found is not None:
        return PartitionLoad(method, index, False, f"{shipped}; a prepared engine for {target} "
                             f"is in {store.directory}",
                             found.facts.build_seconds if found.facts else None)
    return PartitionLoad(method, index, True,
                         f"{shipped}: the first load builds it for {target} "
                         + (f"({refused})" if refused else f"(none prepared in {store.directory})"),
                         None)


def _capabilities(cc) -> str:
    if cc == "all" or cc is None:
        return "for all its capabilities"
    return "for " + ", ".join(cc)


def format_first_load(loads: list[PartitionLoad]) -> str:
    lines = ["first load (TensorRT partitions):"]
    for p in loads:
        took = f" (build measured: {p.build_seconds:.2f} s)" if p.build_seconds is not None else ""
        lines.append(f"  {p.method}[{p.index}]: {'BUILDS' if p.builds else 'no build'}: "
                     f"{p.reason}{took}")
    return "\n".join(lines)
