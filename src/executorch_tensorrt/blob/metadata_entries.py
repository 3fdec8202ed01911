"""Typed metadata entries: named-data weights, profiling's node map, build facts.

Parts of ``BlobMetadata`` (metadata.py) with their schema checks; split out
to keep each module short. Each ``from_json`` raises BlobError with the
format's messages; ``to_json`` writes back the JSON it was read from.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .format import (ENGINE_KINDS, I64_MAX, MAX_KEY_LENGTH, PRECISIONS, TRT_FLAVORS,
                     WEIGHT_DTYPES, WEIGHTS_LOCATIONS, BlobError, is_int, show, weight_nbytes)
from .json_checks import check_name, check_object_keys, ordered, parse_named

_CAPABILITY = re.compile(r"SM[0-9]{2,4}")
_VERSION = re.compile(r"[0-9A-Za-z._+-]{1,64}")
_KEY = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_KEY_LENGTH)
_WEIGHT_KEYS = ("name", "key", "dtype", "shape", "nbytes")


@dataclass(frozen=True)
class WeightEntry:
    """A weight kept in the program's named data: its ONNX initializer name, key, extent."""

    name: str
    key: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_json(cls, w: Any, where: str, key_info: dict | None) -> "WeightEntry":
        if not isinstance(w, dict) or set(w) != set(_WEIGHT_KEYS):
            raise BlobError(f"{where} must be an object with exactly {sorted(_WEIGHT_KEYS)}, "
                            f"got {show(w)}")
        check_object_keys(w, where, key_info)
        check_name(w["name"], f"{where}.name")
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
        return cls(w["name"], key, dtype, tuple(shape), nbytes, tuple(w))

    def to_json(self) -> dict:
        return ordered({"name": self.name, "key": self.key, "dtype": self.dtype,
                        "shape": list(self.shape), "nbytes": self.nbytes}, (), self.key_order)


@dataclass(frozen=True)
class NodeSource:
    """Profiling's map entry (docs/profiling.md): an ONNX node and the edge nodes it came from."""

    node: str
    edge_nodes: tuple[str, ...]
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> dict:
        return ordered({"node": self.node, "edge_nodes": list(self.edge_nodes)}, (),
                       self.key_order)


def parse_node_sources(sources: Any, key_info: dict | None) -> tuple[NodeSource, ...]:
    if not isinstance(sources, (list, tuple)):
        raise BlobError(f"'onnx_node_sources' must be an array, got {type(sources).__name__}")
    out = []
    for i, entry in enumerate(sources):
        where = f"onnx_node_sources[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"node", "edge_nodes"}:
            raise BlobError(f"{where} must be an object with exactly 'node' and 'edge_nodes', "
                            f"got {show(entry)}")
        check_object_keys(entry, where, key_info)
        check_name(entry["node"], f"{where}.node")
        edges = entry["edge_nodes"]
        if not isinstance(edges, (list, tuple)):
            raise BlobError(f"{where}.edge_nodes must be an array, got {show(edges)}")
        for j, e in enumerate(edges):
            check_name(e, f"{where}.edge_nodes[{j}]")
        out.append(NodeSource(entry["node"], tuple(edges), tuple(entry)))
    return tuple(out)


@dataclass(frozen=True)
class BuildFacts:
    """What built (or, with no plan, should build) the engine; None: not recorded."""

    precision: str | None = None
    trt_flavor: str | None = None
    trt_version: str | None = None
    compute_capabilities: str | tuple[str, ...] | None = None  # "all" or ("SM89", ...)
    build_seconds: float | None = None  # the engine's measured build time at export
    # TensorRT's activation memory per optimization profile, as its builder
    # reported it at export (engine order): what a context needs beside weights.
    activation_bytes: tuple[int, ...] | None = None

    @classmethod
    def from_json(cls, meta: dict) -> "BuildFacts":
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
        cc = meta.get("compute_capabilities")
        if "compute_capabilities" in meta:
            if cc != "all" and not (isinstance(cc, (list, tuple)) and all(
                    isinstance(c, str) and _CAPABILITY.fullmatch(c) for c in cc)):
                raise BlobError("'compute_capabilities' must be \"all\" or an array of "
                                f"strings such as \"SM89\", got {show(cc)}")
        seconds = meta.get("build_seconds")
        if "build_seconds" in meta and (isinstance(seconds, bool) or not isinstance(
                seconds, (int, float)) or not 0 <= seconds < 1e7):
            raise BlobError("'build_seconds' must be a number of seconds (0 to 1e7), "
                            f"got {show(seconds)}")
        activation = meta.get("activation_bytes")
        if "activation_bytes" in meta and not (
                isinstance(activation, (list, tuple)) and activation
                and all(is_int(n) and 0 <= n <= I64_MAX for n in activation)):
            raise BlobError("'activation_bytes' must be a non-empty array of byte counts (one "
                            f"per optimization profile), got {show(activation)}")
        return cls(meta.get("precision"), meta.get("trt_flavor"), meta.get("trt_version"),
                   cc if cc is None or cc == "all" else tuple(cc), seconds,
                   None if activation is None else tuple(activation))

    @property
    def precision_or_default(self) -> str:
        return self.precision if self.precision is not None else "fp32"

    def to_json(self) -> dict:
        out: dict = {}
        for k in ("precision", "trt_flavor", "trt_version"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        cc = self.compute_capabilities
        if cc is not None:
            out["compute_capabilities"] = cc if cc == "all" else list(cc)
        if self.build_seconds is not None:
            out["build_seconds"] = self.build_seconds
        if self.activation_bytes is not None:
            out["activation_bytes"] = list(self.activation_bytes)
        return out


def parse_weights(meta: dict, key_info: dict | None) -> tuple[WeightEntry, ...] | None:
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
        return None
    weights = meta.get("weights")
    if not isinstance(weights, (list, tuple)):
        raise BlobError("'weights_location' is \"named_data\" but 'weights' is not an array "
                        f"(got {type(weights).__name__}); re-export the program")
    return parse_named(weights, "weights", "weight",
                       lambda w, where: WeightEntry.from_json(w, where, key_info))
