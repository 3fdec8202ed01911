"""Typed state metadata: our "state" entries and Torch-TensorRT's "aliased_io".

"state" (docs/llm.md, docs/blob-format.md): buffers the partition owns, e.g.
KV caches. Each entry names the ONNX input that reads the state and the
ONNX output that holds its new value, the state's dtype and static shape,
its initial value ("zeros", or "section:<name>" for a blob section of
exactly the state's bytes), how the executor updates it ("functional": the
output is a new value; "in_place": the output aliases the input;
"rewrite_in_place": one buffer is both, the engine reading the whole state
and writing the whole new value, with no aliasing layer: an fp8 KV cache,
aot/state/fp8_cache.py) and, for a
cache written at contiguous positions, which input holds them ("positions").
The executors allocate these sizes, so every one is bounded here.

"aliased_io" (Torch-TensorRT's TR02): outputs written in place into an
input's memory, kind "kv_cache_update" or "user".

Each type's ``from_json`` holds the schema checks (the bindings they refer to
are the already-parsed ``metadata.Binding`` values, passed by name), and
``to_json`` writes back exactly the JSON it was read from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .format import DTYPE_ITEMSIZE, BlobError, is_int, show
from .json_checks import check_object_keys, ordered

#: At most this many states per blob, each at most MAX_STATE_BYTES bytes, all
#: together at most MAX_TOTAL_STATE_BYTES.
MAX_STATES = 1024
MAX_STATE_BYTES = 1 << 36
MAX_TOTAL_STATE_BYTES = 1 << 38
MAX_STATE_RANK = 8
STATE_UPDATES = ("functional", "in_place", "rewrite_in_place")
ALIAS_KINDS = ("kv_cache_update", "user")
SECTION_INIT_PREFIX = "section:"
_REQUIRED = ("fqn", "onnx_input", "onnx_output", "dtype", "shape", "init")
_OPTIONAL = ("update", "positions")


def _name(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v or len(v) > 1024 or any(ord(c) < 0x20 for c in v):
        raise BlobError(f"{where} must be a non-empty string (at most 1024 characters, no "
                        f"control characters), got {show(v)}")
    return v


@dataclass(frozen=True)
class StatePositions:
    """The 1-D int64 input holding a cache's write positions, and the state axis they index."""

    input: str
    axis: int
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_json(cls, p: Any, entry: dict, bindings: Mapping[str, Any], where: str,
                  key_info: dict | None) -> "StatePositions":
        if not isinstance(p, dict) or set(p) != {"input", "axis"}:
            raise BlobError(f"{where}.positions must be an object with exactly 'input' and "
                            f"'axis', got {show(p)}")
        check_object_keys(p, f"{where}.positions", key_info)
        b = bindings.get(p["input"])
        if b is None or not b.is_input:
            raise BlobError(f"{where}.positions.input {show(p['input'])} names no input binding")
        if b.dtype not in ("int64", "torch.int64") or len(b.shape) != 1:
            raise BlobError(f"{where}.positions.input {p['input']!r} must be a 1-D int64 input, "
                            f"the binding is {show(b.dtype)} {show(list(b.shape))}")
        axis, rank = p["axis"], len(entry["shape"])
        if not is_int(axis) or not 1 <= axis < rank:
            raise BlobError(f"{where}.positions.axis must be an integer in [1, {rank - 1}] (an "
                            f"axis of the state, not the batch), got {show(axis)}")
        return cls(p["input"], axis, tuple(p))

    def to_json(self) -> dict:
        return ordered({"input": self.input, "axis": self.axis}, (), self.key_order)


@dataclass(frozen=True)
class StateEntry:
    """One delegate-owned state (a KV cache): see the module docstring."""

    fqn: str
    onnx_input: str
    onnx_output: str
    dtype: str
    shape: tuple[int, ...]
    init: str                     # "zeros" or "section:<name>"
    update: str | None = None     # None: not recorded, i.e. "functional"
    positions: StatePositions | None = None
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        n = DTYPE_ITEMSIZE[self.dtype]
        for d in self.shape:
            n *= d
        return n

    @property
    def in_place(self) -> bool:
        """One buffer is the state's input and output (aliased or rewritten)."""
        return self.update in ("in_place", "rewrite_in_place")

    @property
    def rewritten(self) -> bool:
        """In place without an aliasing layer in the engine (rewrite_in_place)."""
        return self.update == "rewrite_in_place"

    @property
    def init_section(self) -> str | None:
        """The section holding the initial value; None for zeros."""
        return None if self.init == "zeros" else self.init[len(SECTION_INIT_PREFIX):]

    @classmethod
    def from_json(cls, e: Any, where: str, bindings: Mapping[str, Any], seen: dict,
                  key_info: dict | None) -> "StateEntry":
        if not isinstance(e, dict):
            raise BlobError(f"{where} must be an object, got {type(e).__name__}")
        check_object_keys(e, where, key_info)
        missing = [k for k in _REQUIRED if k not in e]
        if missing:
            raise BlobError(f"{where} lacks {missing} (a state needs {list(_REQUIRED)})")
        extra = sorted(set(e) - set(_REQUIRED) - set(_OPTIONAL))
        if extra:
            raise BlobError(f"{where} has unknown keys {extra}")
        _name(e["fqn"], f"{where}.fqn")
        for key in ("onnx_input", "onnx_output"):
            name = _name(e[key], f"{where}.{key}")
            if name in bindings:
                raise BlobError(f"{where}.{key} {show(name)} is also an io_binding: a state "
                                "is not a delegate argument (ExecuTorch never passes it)")
            if name in seen:
                raise BlobError(f"{where}.{key} {show(name)} is already used by {seen[name]}")
            seen[name] = where
        if e["dtype"] not in DTYPE_ITEMSIZE:
            raise BlobError(f"{where}.dtype must be one of {sorted(DTYPE_ITEMSIZE)}, "
                            f"got {show(e['dtype'])}")
        shape = e["shape"]
        if not isinstance(shape, (list, tuple)) or len(shape) > MAX_STATE_RANK or not all(
                is_int(d) and 0 <= d <= MAX_STATE_BYTES for d in shape):
            raise BlobError(f"{where}.shape must be an array of at most {MAX_STATE_RANK} "
                            f"non-negative integers (a state has a static shape), got "
                            f"{show(shape)}")
        entry = cls(e["fqn"], e["onnx_input"], e["onnx_output"], e["dtype"], tuple(shape),
                    e["init"], e.get("update"), None, tuple(e))
        if entry.nbytes > MAX_STATE_BYTES:
            raise BlobError(f"{where} ({e['fqn']!r}) would take {entry.nbytes} bytes, more than "
                            f"the limit of {MAX_STATE_BYTES} per state")
        return entry

    def with_checked_tail(self, e: dict, where: str, bindings: Mapping[str, Any],
                          key_info: dict | None) -> "StateEntry":
        """The checks after the running byte total (init, update, positions)."""
        init = e["init"]
        if init != "zeros" and not (isinstance(init, str) and init.startswith(
                SECTION_INIT_PREFIX) and len(init) > len(SECTION_INIT_PREFIX)):
            raise BlobError(f"{where}.init must be \"zeros\" or \"section:<name>\", "
                            f"got {show(init)}")
        if e.get("update", "functional") not in STATE_UPDATES:
            raise BlobError(f"{where}.update must be one of {list(STATE_UPDATES)}, "
                            f"got {show(e.get('update'))}")
        if "positions" not in e:
            return self
        positions = StatePositions.from_json(e["positions"], e, bindings, where, key_info)
        return StateEntry(self.fqn, self.onnx_input, self.onnx_output, self.dtype, self.shape,
                          self.init, self.update, positions, self.key_order)

    def to_json(self) -> dict:
        known = {"fqn": self.fqn, "onnx_input": self.onnx_input, "onnx_output": self.onnx_output,
                 "dtype": self.dtype, "shape": list(self.shape), "init": self.init}
        if self.update is not None:
            known["update"] = self.update
        if self.positions is not None:
            known["positions"] = self.positions.to_json()
        return ordered(known, (), self.key_order)


def parse_state(states: Any, bindings: Mapping[str, Any],
                key_info: dict | None) -> tuple[StateEntry, ...]:
    """The "state" array; `bindings`: every io_binding by name."""
    if not isinstance(states, (list, tuple)):
        raise BlobError(f"'state' must be an array, got {type(states).__name__}")
    if len(states) > MAX_STATES:
        raise BlobError(f"'state' has {len(states)} entries, more than {MAX_STATES}")
    seen: dict[str, str] = {}
    total = 0
    out = []
    for i, e in enumerate(states):
        where = f"state[{i}]"
        entry = StateEntry.from_json(e, where, bindings, seen, key_info)
        total += entry.nbytes
        if total > MAX_TOTAL_STATE_BYTES:
            raise BlobError(f"the states take more than {MAX_TOTAL_STATE_BYTES} bytes together")
        out.append(entry.with_checked_tail(e, where, bindings, key_info))
    return tuple(out)


def check_state_sections(states: tuple[StateEntry, ...], section_sizes: dict[str, int]) -> None:
    """Each "section:<name>" initial value names a section of exactly the state's size."""
    for i, e in enumerate(states):
        name = e.init_section
        if name is None:
            continue
        if name not in section_sizes:
            raise BlobError(f"state[{i}] ({e.fqn!r}) takes its initial value from section "
                            f"{name!r}, which the blob does not have")
        if section_sizes[name] != e.nbytes:
            raise BlobError(f"state[{i}] ({e.fqn!r}): section {name!r} holds "
                            f"{section_sizes[name]} bytes, the state is {e.nbytes}")


@dataclass(frozen=True)
class AliasedIO:
    """Torch-TensorRT's in-place pair: `output` is written into `input`'s memory."""

    output: str
    input: str
    kind: str | None = None   # None: not recorded, i.e. "kv_cache_update" (Torch-TensorRT's default)
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def alias_kind(self) -> str:
        return self.kind if self.kind is not None else "kv_cache_update"

    def to_json(self) -> dict:
        known = {"output": self.output, "input": self.input}
        if self.kind is not None:
            known["kind"] = self.kind
        return ordered(known, (), self.key_order)


def parse_aliased_io(aliased: Any, bindings: Mapping[str, Any],
                     key_info: dict | None) -> tuple[AliasedIO, ...]:
    """Torch-TensorRT's pairs: both names are bindings (output, input), each output
    aliased once; "user" pairs have equal recorded shapes. Whether a
    "kv_cache_update" pair is the engine's own alias is checked at load."""
    if not isinstance(aliased, list):
        raise BlobError(f"'aliased_io' must be an array, got {type(aliased).__name__}")
    outputs: set[str] = set()
    out = []
    for i, a in enumerate(aliased):
        where = f"aliased_io[{i}]"
        if not isinstance(a, dict) or not {"output", "input"} <= set(a) or not set(a) <= {
                "output", "input", "kind"}:
            raise BlobError(f"{where} must be an object with 'output', 'input' and optionally "
                            f"'kind', got {show(a)}")
        check_object_keys(a, where, key_info)
        kind = a.get("kind", "kv_cache_update")  # Torch-TensorRT's reader default
        if kind not in ALIAS_KINDS:
            raise BlobError(f"{where}.kind must be one of {list(ALIAS_KINDS)}, got {show(kind)}")
        o, n = bindings.get(a["output"]), bindings.get(a["input"])
        if o is None or o.is_input:
            raise BlobError(f"{where}.output {show(a['output'])} names no output binding")
        if n is None or not n.is_input:
            raise BlobError(f"{where}.input {show(a['input'])} names no input binding")
        if a["output"] in outputs:
            raise BlobError(f"{where}: output {a['output']!r} is aliased twice")
        outputs.add(a["output"])
        if kind == "user" and o.shape != n.shape:
            raise BlobError(f"{where}: a \"user\" alias needs equal shapes; output "
                            f"{a['output']!r} is {list(o.shape)}, input {a['input']!r} is "
                            f"{list(n.shape)}")
        if o.dtype and n.dtype and o.dtype != n.dtype:
            raise BlobError(f"{where}: output {a['output']!r} is {o.dtype}, input "
                            f"{a['input']!r} is {n.dtype}; an alias needs one dtype")
        out.append(AliasedIO(a["output"], a["input"], a.get("kind"), tuple(a)))
    return tuple(out)
