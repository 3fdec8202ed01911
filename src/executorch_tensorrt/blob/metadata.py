"""Typed blob metadata: the JSON object, parsed and checked once.

``BlobMetadata.from_json`` runs every schema check the runtime relies on (the
error messages are the format's interface: tests and users read them) and
returns frozen dataclasses; ``to_json`` writes back exactly the JSON object it
was read from (same keys, same order, same values), so a blob read and
written again is byte for byte the same. read_blob parses once; write_blob
takes a ``BlobMetadata`` (or a plain dict, parsed here first); the AOT side
builds the dataclasses, and the runtime reads their fields, never string keys.

Keys a type does not know are kept in ``extra`` and written back as they came
(other writers' keys: Torch-TensorRT's, ``onnx_opset``); ``key_order`` records
the order a parsed object had. The state types live in ``metadata_state.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .format import (DTYPE_TO_SCALAR_TYPE, I32_MAX, I32_MIN, I64_MAX, READ_DTYPES,
                     SECTION_ONNX, BlobError, is_int, show)
from .json_checks import check_object_keys, extras, ordered, parse_named
from .metadata_entries import (BuildFacts, NodeSource, WeightEntry, parse_node_sources,
                               parse_weights)
from .metadata_profiles import Profile, parse_optimization_profiles, parse_profiles
from .metadata_state import AliasedIO, StateEntry, parse_aliased_io, parse_state

__all__ = ["AliasedIO", "Binding", "BlobMetadata", "BuildFacts", "NodeSource", "Profile",
           "StateEntry", "WeightEntry"]

_BINDING_KEYS = ("name", "dtype", "shape", "is_input")
I64_MIN = -(2**63)
#: The dtypes an "index_range" may be given for (integer inputs).
INTEGER_DTYPES = frozenset({"uint8", "int8", "int32", "int64"}) | {
    "torch." + n for n in ("uint8", "int8", "int16", "int32", "int64")}


@dataclass(frozen=True)
class Binding:
    """One io_bindings entry: a delegate input or output."""

    name: str
    dtype: str                      # a blob dtype name, or "" (not recorded)
    shape: tuple[int, ...]          # -1 for a dynamic dimension
    is_input: bool
    #: [lo, hi): the values an integer input may take (optional; runtime use: another part)
    index_range: tuple[int, int] | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_json(cls, b: Any, where: str, dtypes: frozenset,
                  key_info: dict | None) -> "Binding":
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
        index_range = None
        if "index_range" in b:
            index_range = _index_range(b["index_range"], where, dtype, b["is_input"])
        return cls(name, dtype, tuple(shape), b["is_input"], index_range,
                   extras(b, _BINDING_KEYS + ("index_range",)), tuple(b))

    def to_json(self) -> dict:
        known = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                 "is_input": self.is_input}
        if self.index_range is not None:
            known["index_range"] = list(self.index_range)
        return ordered(known, self.extra, self.key_order)


def _index_range(r: Any, where: str, dtype: str, is_input: bool) -> tuple[int, int]:
    if not is_input:
        raise BlobError(f"{where}.index_range is set on an output: only an input's values "
                        "can be bounded; the metadata is corrupt")
    if dtype not in INTEGER_DTYPES:
        raise BlobError(f"{where}.index_range is set on a {show(dtype)} input: only integer "
                        "inputs have an index range; the metadata is corrupt")
    if not (isinstance(r, list) and len(r) == 2 and all(
            is_int(v) and I64_MIN <= v <= I64_MAX for v in r) and r[0] < r[1]):
        raise BlobError(f"{where}.index_range must be [lo, hi], two 64-bit integers with "
                        f"lo < hi (the input's values lie in [lo, hi)), got {show(r)}")
    return r[0], r[1]




def _equal_dims(groups: Any, bindings: tuple[Binding, ...]) -> tuple[tuple[tuple[int, int], ...], ...]:
    """"equal_dims": groups of [input_index, dim] (the index counts inputs only)
    whose sizes must be equal at run time; static sizes in a group must agree."""
    inputs = [b for b in bindings if b.is_input]
    if not isinstance(groups, list):
        raise BlobError(f"'equal_dims' must be an array of groups, got {show(groups)}")
    out = []
    for g, group in enumerate(groups):
        where = f"equal_dims[{g}]"
        if not isinstance(group, list) or len(group) < 2:
            raise BlobError(f"{where} must be an array of at least 2 [input_index, dim] pairs, "
                            f"got {show(group)}")
        members = []
        for m, pair in enumerate(group):
            if not (isinstance(pair, list) and len(pair) == 2 and all(map(is_int, pair))):
                raise BlobError(f"{where}[{m}] must be [input_index, dim], two integers, "
                                f"got {show(pair)}")
            i, d = pair
            if not 0 <= i < len(inputs):
                raise BlobError(f"{where}[{m}] names input {i}, the partition has "
                                f"{len(inputs)} inputs")
            if not 0 <= d < len(inputs[i].shape):
                raise BlobError(f"{where}[{m}] names dimension {d} of input {i} "
                                f"({inputs[i].name!r}), which has rank {len(inputs[i].shape)}")
            members.append((i, d))
        if len(set(members)) != len(members):
            raise BlobError(f"{where} names a dimension twice: {show(group, 80)}")
        static = {inputs[i].shape[d] for i, d in members} - {-1}
        if len(static) > 1:
            raise BlobError(f"{where} groups static dimensions of different sizes "
                            f"{sorted(static)}: they can never be equal; the metadata is corrupt")
        out.append(tuple(members))
    return tuple(out)


#: Top-level keys with a typed field (the writer puts the first four first).
_TOP_KEYS = ("io_bindings", "aliased_io", "hardware_compatible", "device_id", "profiles",
             "optimization_profiles", "onnx_node_sources", "precision", "trt_flavor",
             "trt_version", "compute_capabilities", "build_seconds", "activation_bytes", "engine",
             "weights_location", "weights", "state", "equal_dims")


@dataclass(frozen=True)
class BlobMetadata:
    """The blob's metadata object, without the writer's own keys ("sections",
    "engine_sha256"). Optional fields are None when the key is absent (and
    then not written); the ``*_or_default`` style properties give the values
    readers assume for an absent key."""

    io_bindings: tuple[Binding, ...]
    aliased_io: tuple[AliasedIO, ...] | None = None
    hardware_compatible: bool | None = None
    device_id: int | None = None
    profiles: tuple[Profile, ...] | None = None
    optimization_profiles: tuple[tuple[Profile, ...], ...] | None = None
    onnx_node_sources: tuple[NodeSource, ...] | None = None
    build: BuildFacts = BuildFacts()
    engine: str | None = None               # ENGINE_KINDS; None: "full"
    weights_location: str | None = None     # WEIGHTS_LOCATIONS; None: "inline"
    weights: tuple[WeightEntry, ...] | None = None
    state: tuple[StateEntry, ...] | None = None
    #: groups of (input_index, dim) that must be equal at run time (runtime use: another part)
    equal_dims: tuple[tuple[tuple[int, int], ...], ...] | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    # -- what readers assume for absent keys ---------------------------------
    @property
    def engine_kind(self) -> str:
        return self.engine if self.engine is not None else "full"

    @property
    def inputs(self) -> tuple[Binding, ...]:
        return tuple(b for b in self.io_bindings if b.is_input)

    @property
    def outputs(self) -> tuple[Binding, ...]:
        return tuple(b for b in self.io_bindings if not b.is_input)

    @property
    def engine_profiles(self) -> tuple[tuple[Profile, ...], ...]:
        """Every optimization profile of the engine, in engine order: the
        "optimization_profiles", else "profiles" alone (one profile, or none)."""
        if self.optimization_profiles is not None:
            return self.optimization_profiles
        return (self.profiles,) if self.profiles else ()

    # -- JSON ----------------------------------------------------------------
    @classmethod
    def of(cls, value: "BlobMetadata | dict") -> "BlobMetadata":
        """`value` itself, or its JSON form parsed (tools and tests hold JSON)."""
        return value if isinstance(value, cls) else cls.from_json(dict(value))

    @classmethod
    def from_json(cls, meta: Any, dtypes: frozenset = READ_DTYPES,
                  key_info: dict | None = None) -> "BlobMetadata":
        """Checks and parses the top-level object (the reader has removed the
        writer's own keys, "sections" and the engine digest). `dtypes`: the
        binding dtypes accepted (the writer accepts fewer than the reader)."""
        if not isinstance(meta, dict):
            raise BlobError(f"metadata JSON must be an object, got {type(meta).__name__}")
        # aliased_io, hardware_compatible and device_id are read by key by
        # Torch-TensorRT's parser, which refuses a blob where they have other types.
        check_object_keys(meta, "the metadata object", key_info)
        if "io_bindings" not in meta:
            raise BlobError("metadata has no 'io_bindings' key")
        bindings = _bindings(meta["io_bindings"], dtypes, key_info)
        by_name = {b.name: b for b in bindings}
        aliased = (parse_aliased_io(meta["aliased_io"], by_name, key_info)
                   if "aliased_io" in meta else None)
        if "hardware_compatible" in meta and not isinstance(meta["hardware_compatible"], bool):
            raise BlobError("'hardware_compatible' must be true or false, got "
                            f"{show(meta['hardware_compatible'])}")
        if "device_id" in meta:
            d = meta["device_id"]
            if not is_int(d) or not I32_MIN <= d <= I32_MAX:
                raise BlobError(f"'device_id' must be a 32-bit integer, got {show(d)}")
        profiles = parse_profiles(meta["profiles"], bindings) if "profiles" in meta else None
        sets = (parse_optimization_profiles(meta["optimization_profiles"], profiles, bindings)
                if "optimization_profiles" in meta else None)
        sources = (parse_node_sources(meta["onnx_node_sources"], key_info)
                   if "onnx_node_sources" in meta else None)
        build = BuildFacts.from_json(meta)
        weights = parse_weights(meta, key_info)
        state = parse_state(meta["state"], by_name, key_info) if "state" in meta else None
        equal = _equal_dims(meta["equal_dims"], bindings) if "equal_dims" in meta else None
        return cls(bindings, aliased, meta.get("hardware_compatible"), meta.get("device_id"),
                   profiles, sets, sources, build, meta.get("engine"),
                   meta.get("weights_location"), weights, state, equal,
                   extras(meta, _TOP_KEYS), tuple(meta))

    def to_json(self) -> dict:
        """The JSON object this metadata was read from (or, built in Python,
        the fields in declaration order, then `extra`)."""
        known: dict = {"io_bindings": [b.to_json() for b in self.io_bindings]}
        if self.aliased_io is not None:
            known["aliased_io"] = [a.to_json() for a in self.aliased_io]
        for k in ("hardware_compatible", "device_id"):
            if getattr(self, k) is not None:
                known[k] = getattr(self, k)
        if self.profiles is not None:
            known["profiles"] = [p.to_json() for p in self.profiles]
        if self.optimization_profiles is not None:
            known["optimization_profiles"] = [[p.to_json() for p in one]
                                              for one in self.optimization_profiles]
        if self.onnx_node_sources is not None:
            known["onnx_node_sources"] = [s.to_json() for s in self.onnx_node_sources]
        known.update(self.build.to_json())
        for k in ("engine", "weights_location"):
            if getattr(self, k) is not None:
                known[k] = getattr(self, k)
        if self.weights is not None:
            known["weights"] = [w.to_json() for w in self.weights]
        if self.state is not None:
            known["state"] = [e.to_json() for e in self.state]
        if self.equal_dims is not None:
            known["equal_dims"] = [[list(m) for m in g] for g in self.equal_dims]
        return ordered(known, self.extra, self.key_order)

    def check_engine_kind(self, engine_size: int, sections: set[str]) -> None:
        """An empty engine region only where the metadata says "engine": "none",
        and then the ONNX section the executor builds from must be there."""
        engine = self.engine_kind
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


def _bindings(bindings: Any, dtypes: frozenset, key_info: dict | None) -> tuple[Binding, ...]:
    if not isinstance(bindings, (list, tuple)):
        raise BlobError(f"'io_bindings' must be an array, got {type(bindings).__name__}")
    return parse_named(bindings, "io_bindings", "binding",
                       lambda b, where: Binding.from_json(b, where, dtypes, key_info))
