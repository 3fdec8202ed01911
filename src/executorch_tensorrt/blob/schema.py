"""The metadata schema: every field the runtime reads, checked once here.

Both write_blob and read_blob run these checks, so the executors receive
metadata whose fields have the types and ranges they rely on; nothing in
``runtime/`` re-validates them. ``key_info`` is the JSON parse hook's record of
key counts and repeats (reading); writing passes None (a dict has no repeats).
"""

from __future__ import annotations

import re
from typing import Any

from ..tensorrt.options import MAX_OPTIMIZATION_PROFILES
from .state_schema import check_aliased_io, check_state
from .format import (
    DTYPE_TO_SCALAR_TYPE,
    ENGINE_KINDS,
    I32_MAX,
    I32_MIN,
    I64_MAX,
    MAX_KEY_LENGTH,
    MAX_OBJECT_KEYS,
    PRECISIONS,
    SECTION_ONNX,
    TRT_FLAVORS,
    WEIGHT_DTYPES,
    WEIGHTS_LOCATIONS,
    BlobError,
    is_int,
    show,
    weight_nbytes,
)

_BINDING_KEYS = ("name", "dtype", "shape", "is_input")
_CAPABILITY = re.compile(r"SM[0-9]{2,4}")
_VERSION = re.compile(r"[0-9A-Za-z._+-]{1,64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_KEY = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_KEY_LENGTH)
_WEIGHT_KEYS = {"name", "key", "dtype", "shape", "nbytes"}


def check_object_keys(obj: dict, where: str, key_info: dict | None) -> None:
    if key_info is not None:
        count, dup = key_info.get(id(obj), (len(obj), None))
    else:
        count, dup = len(obj), None
    if dup is not None:
        raise BlobError(f"duplicate key {show(dup)} in {where}")
    if count > MAX_OBJECT_KEYS:
        raise BlobError(f"{where} has more than {MAX_OBJECT_KEYS} keys ({count})")


def check_digest(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise BlobError(f"{where} must be a SHA-256 digest (64 lowercase hex digits), got "
                        f"{show(value)}: the blob's metadata is corrupt; re-export the program")
    return value


def _check_bindings(bindings: Any, dtypes: frozenset, key_info: dict | None) -> None:
    if not isinstance(bindings, (list, tuple)):
        raise BlobError(f"'io_bindings' must be an array, got {type(bindings).__name__}")
    seen: dict[str, int] = {}
    for i, b in enumerate(bindings):
        where = f"io_bindings[{i}]"
        if not isinstance(b, dict):
            raise BlobError(f"{where} must be an object, got {type(b).__name__}")
        check_object_keys(b, where, key_info)
        for k in _BINDING_KEYS:
            if k not in b:
                raise BlobError(f"{where} lacks {k!r} (every binding needs "
                                "name, dtype, shape and is_input)")
        name = b["name"]
        if not isinstance(name, str) or not name:
            raise BlobError(f"{where}.name must be a non-empty string, got {show(name)}")
        if any(ord(c) < 0x20 for c in name):
            raise BlobError(f"{where}.name {show(name)} contains a control character")
        dtype = b["dtype"]
        if not isinstance(dtype, str) or dtype not in dtypes:
            raise BlobError(f"{where}.dtype {show(dtype)} is not a known dtype "
                            f"(one of {sorted(DTYPE_TO_SCALAR_TYPE)}, or \"\")")
        shape = b["shape"]
        if not isinstance(shape, (list, tuple)) or not all(
            is_int(d) and -1 <= d <= I64_MAX for d in shape
        ):
            raise BlobError(f"{where}.shape must be an array of integers >= -1 "
                            f"(-1 for a dynamic dimension), got {show(shape)}")
        if not isinstance(b["is_input"], bool):
            raise BlobError(f"{where}.is_input must be true or false, got {show(b['is_input'])}")
        if name in seen:
            raise BlobError(f"duplicate binding name {show(name)} "
                            f"(io_bindings[{seen[name]}] and {where})")
        seen[name] = i


def _check_profiles(profiles: Any, bindings: list) -> None:
    """One optimization profile per dynamic input: min <= opt <= max per
    dimension, each of the input's rank, static dimensions fixed."""
    if not isinstance(profiles, (list, tuple)):
        raise BlobError(f"'profiles' must be an array, got {type(profiles).__name__}")
    inputs = {b["name"]: b for b in bindings if b["is_input"]}
    seen: set[str] = set()
    for i, p in enumerate(profiles):
        where = f"profiles[{i}]"
        if not isinstance(p, dict):
            raise BlobError(f"{where} must be an object with name, min, opt and max, "
                            f"got {type(p).__name__}")
        name = p.get("name")
        if not isinstance(name, str) or name not in inputs:
            raise BlobError(f"{where}.name {show(name)} names no input binding "
                            f"(inputs: {show(sorted(inputs), 80)})")
        if name in seen:
            raise BlobError(f"{where}: a second profile for input {name!r}")
        seen.add(name)
        shape = inputs[name]["shape"]
        dims = {}
        for key in ("min", "opt", "max"):
            v = p.get(key)
            if not isinstance(v, (list, tuple)) or len(v) != len(shape) or not all(
                    is_int(d) and 0 <= d <= I64_MAX for d in v):
                raise BlobError(f"{where}.{key} must be an array of {len(shape)} non-negative "
                                f"integers (the rank of input {name!r}), got {show(v)}")
            dims[key] = v
        for d, (s, lo, opt, hi) in enumerate(zip(shape, dims["min"], dims["opt"], dims["max"])):
            if not lo <= opt <= hi:
                raise BlobError(f"{where} (input {name!r}) dimension {d}: min {lo}, opt {opt}, "
                                f"max {hi} are not ordered min <= opt <= max")
            if s >= 0 and not lo == hi == s:
                raise BlobError(f"{where} (input {name!r}) dimension {d} is static ({s}) but "
                                f"the profile gives min {lo}, max {hi}")


def _check_optimization_profiles(meta: dict) -> None:
    """"optimization_profiles": every optimization profile of the engine, in
    engine order (docs/blob-format.md). Each is checked like "profiles", names
    the same inputs, profile 0 is "profiles" itself (what readers that know one
    profile use), and together they leave no gap in any dimension's range (a
    size between two profiles would match no engine profile)."""
    sets = meta["optimization_profiles"]
    if not isinstance(sets, (list, tuple)) or not 1 <= len(sets) <= MAX_OPTIMIZATION_PROFILES:
        raise BlobError("'optimization_profiles' must be an array of 1 to "
                        f"{MAX_OPTIMIZATION_PROFILES} profiles, got {show(sets)}")
    if "profiles" not in meta:
        raise BlobError("'optimization_profiles' is set but 'profiles' (profile 0) is not: the "
                        "metadata is inconsistent; re-export the program")
    first = meta["profiles"]
    names = sorted(p["name"] for p in first)
    for k, profiles in enumerate(sets):
        try:
            _check_profiles(profiles, meta["io_bindings"])
        except BlobError as e:
            raise BlobError(f"optimization_profiles[{k}]: {e}") from None
        if sorted(p["name"] for p in profiles) != names:
            raise BlobError(f"optimization_profiles[{k}] names inputs "
                            f"{show(sorted(p['name'] for p in profiles), 80)}, profile 0 names "
                            f"{show(names, 80)}: every profile gives every dynamic input")
    if [dict(p) for p in sets[0]] != [dict(p) for p in first]:
        raise BlobError("optimization_profiles[0] differs from 'profiles': profile 0 must be "
                        "'profiles' itself; the metadata is corrupt")
    for name in names:
        per_profile = [next(p for p in profiles if p["name"] == name) for profiles in sets]
        for d in range(len(per_profile[0]["min"])):
            spans = sorted((p["min"][d], p["max"][d]) for p in per_profile)
            reach = spans[0][1]
            for lo, hi in spans[1:]:
                if lo > reach + 1:
                    raise BlobError(f"optimization_profiles leave input {name!r} dimension {d} "
                                    f"sizes {reach + 1}..{lo - 1} in no profile, between "
                                    "two that cover the sizes around them; the metadata is "
                                    "corrupt")
                reach = max(reach, hi)


def _check_runtime_fields(meta: dict) -> None:
    """Fields the executors read (precision, flavour, version, capabilities)."""
    if "precision" in meta and meta["precision"] not in PRECISIONS:
        raise BlobError(f"'precision' must be one of {list(PRECISIONS)}, "
                        f"got {show(meta['precision'])}")
    if "trt_flavor" in meta and meta["trt_flavor"] not in TRT_FLAVORS:
        raise BlobError(f"'trt_flavor' must be one of {list(TRT_FLAVORS)}, "
                        f"got {show(meta['trt_flavor'])}")
    if "trt_version" in meta:
        v = meta["trt_version"]
        if not isinstance(v, str) or not _VERSION.fullmatch(v):
            raise BlobError("'trt_version' must be a version string (1-64 characters of "
                            f"letters, digits, '.', '_', '+', '-'), got {show(v)}")
    if "compute_capabilities" in meta:
        cc = meta["compute_capabilities"]
        if cc != "all" and not (isinstance(cc, (list, tuple)) and all(
                isinstance(c, str) and _CAPABILITY.fullmatch(c) for c in cc)):
            raise BlobError("'compute_capabilities' must be \"all\" or an array of strings "
                            f"such as \"SM89\", got {show(cc)}")


def check_metadata(meta: dict, dtypes: frozenset, key_info: dict | None) -> None:
    """The top-level object, excluding the writer's own keys ("sections" and
    the engine digest), which the reader checks with the regions."""
    # aliased_io, hardware_compatible and device_id are read by key by
    # Torch-TensorRT's parser, which refuses a blob where they have other types.
    check_object_keys(meta, "the metadata object", key_info)
    if "io_bindings" not in meta:
        raise BlobError("metadata has no 'io_bindings' key")
    _check_bindings(meta["io_bindings"], dtypes, key_info)
    if "aliased_io" in meta:
        check_aliased_io(meta["aliased_io"], meta["io_bindings"], key_info)
    if "hardware_compatible" in meta and not isinstance(meta["hardware_compatible"], bool):
        raise BlobError("'hardware_compatible' must be true or false, got "
                        f"{show(meta['hardware_compatible'])}")
    if "device_id" in meta:
        d = meta["device_id"]
        if not is_int(d) or not I32_MIN <= d <= I32_MAX:
            raise BlobError(f"'device_id' must be a 32-bit integer, got {show(d)}")
    if "profiles" in meta:
        _check_profiles(meta["profiles"], meta["io_bindings"])
    if "optimization_profiles" in meta:
        _check_optimization_profiles(meta)
    if "onnx_node_sources" in meta:
        _check_node_sources(meta["onnx_node_sources"], key_info)
    _check_runtime_fields(meta)
    _check_weights(meta, key_info)
    if "state" in meta:
        check_state(meta["state"], meta["io_bindings"], key_info)


def check_engine_kind(engine_size: int, meta: dict, sections: set[str]) -> None:
    """An empty engine region only where the metadata says "engine": "none",
    and then the ONNX section the executor builds from must be there."""
    engine = meta.get("engine", "full")
    if engine_size == 0 and engine != "none":
        raise BlobError("engine is empty (engine size 0) but the metadata does not say "
                        "\"engine\": \"none\": the blob is truncated or corrupt")
    if engine == "none":
        if engine_size:
            raise BlobError(f"the metadata says \"engine\": \"none\" but the engine region "
                            f"holds {engine_size} bytes; the metadata is corrupt")
        if SECTION_ONNX not in sections:
            raise BlobError("the blob has no engine (\"engine\": \"none\") and no 'onnx' "
                            "section to build one from; re-export the program")


def _check_weights(meta: dict, key_info: dict | None) -> None:
    """"engine", "weights_location" and "weights" (docs/blob-format.md): each
    named-data weight's ONNX initializer name, key, dtype, shape and byte size,
    which must agree, since the executors hand these sizes to onnxruntime and
    TensorRT as the extent of memory they read."""
    engine = meta.get("engine", "full")
    if engine not in ENGINE_KINDS:
        raise BlobError(f"'engine' must be one of {list(ENGINE_KINDS)}, got {show(engine)}")
    location = meta.get("weights_location", "inline")
    if location not in WEIGHTS_LOCATIONS:
        raise BlobError(f"'weights_location' must be one of {list(WEIGHTS_LOCATIONS)}, "
                        f"got {show(location)}")
    if location == "inline":
        if "weights" in meta:
            raise BlobError("'weights' is set but 'weights_location' is not \"named_data\": "
                            "the metadata is inconsistent; re-export the program")
        if engine == "stripped":
            raise BlobError("a weight-stripped engine needs its weights in named data, but "
                            "'weights_location' is \"inline\"; re-export the program")
        return
    weights = meta.get("weights")
    if not isinstance(weights, (list, tuple)):
        raise BlobError("'weights_location' is \"named_data\" but 'weights' is not an array "
                        f"(got {type(weights).__name__}); re-export the program")
    names: dict[str, int] = {}
    for i, w in enumerate(weights):
        where = f"weights[{i}]"
        if not isinstance(w, dict) or set(w) != _WEIGHT_KEYS:
            raise BlobError(f"{where} must be an object with exactly {sorted(_WEIGHT_KEYS)}, "
                            f"got {show(w)}")
        check_object_keys(w, where, key_info)
        _check_name(w["name"], f"{where}.name")
        if w["name"] in names:
            raise BlobError(f"duplicate weight name {show(w['name'])} "
                            f"(weights[{names[w['name']]}] and {where})")
        names[w["name"]] = i
        key = w["key"]
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise BlobError(f"{where}.key must be 1-{MAX_KEY_LENGTH} printable ASCII characters "
                            f"without spaces, got {show(key)}")
        dtype = w["dtype"]
        if dtype not in WEIGHT_DTYPES:
            raise BlobError(f"{where}.dtype must be one of {sorted(WEIGHT_DTYPES)}, "
                            f"got {show(dtype)}")
        shape, nbytes = w["shape"], w["nbytes"]
        if not isinstance(shape, (list, tuple)) or not all(
                is_int(d) and 0 <= d <= I64_MAX for d in shape):
            raise BlobError(f"{where}.shape must be an array of non-negative integers, "
                            f"got {show(shape)}")
        count = 1
        for d in shape:
            count = min(count * d, I64_MAX + 1)
        if not is_int(nbytes) or nbytes != weight_nbytes(dtype, count):
            raise BlobError(f"{where}.nbytes {show(nbytes)} is not the size of a {dtype} "
                            f"tensor of shape {show(shape)}; the metadata is corrupt")


def _check_name(v: Any, where: str) -> None:
    if not isinstance(v, str) or not v or any(ord(c) < 0x20 for c in v):
        raise BlobError(f"{where} must be a non-empty string without control characters, "
                        f"got {show(v)}")


def _check_node_sources(sources: Any, key_info: dict | None) -> None:
    """Profiling's map (docs/profiling.md): [{"node": ONNX node name,
    "edge_nodes": [edge node names it came from]}, ...]."""
    if not isinstance(sources, (list, tuple)):
        raise BlobError(f"'onnx_node_sources' must be an array, got {type(sources).__name__}")
    for i, entry in enumerate(sources):
        where = f"onnx_node_sources[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"node", "edge_nodes"}:
            raise BlobError(f"{where} must be an object with exactly 'node' and 'edge_nodes', "
                            f"got {show(entry)}")
        check_object_keys(entry, where, key_info)
        _check_name(entry["node"], f"{where}.node")
        edges = entry["edge_nodes"]
        if not isinstance(edges, (list, tuple)):
            raise BlobError(f"{where}.edge_nodes must be an array, got {show(edges)}")
        for j, e in enumerate(edges):
            _check_name(e, f"{where}.edge_nodes[{j}]")
