"""Schema checks for state: our "state" entries and Torch-TensorRT's "aliased_io".

"state" (docs/llm.md, docs/blob-format.md): buffers the partition owns, e.g.
KV caches. Each entry names the ONNX input that reads the state and the
ONNX output that holds its new value, the state's dtype and static shape,
its initial value ("zeros", or "section:<name>" for a blob section of
exactly the state's bytes), how the executor updates it ("functional": the
output is a new value; "in_place": the output aliases the input) and, for a
cache written at contiguous positions, which input holds them ("positions").
The executors allocate these sizes, so every one is bounded here.

"aliased_io" (Torch-TensorRT's TR02): outputs written in place into an
input's memory, kind "kv_cache_update" or "user".
"""
from __future__ import annotations

from typing import Any

from .format import DTYPE_ITEMSIZE, BlobError, is_int, show

#: At most this many states per blob, each at most MAX_STATE_BYTES bytes, all
#: together at most MAX_TOTAL_STATE_BYTES.
MAX_STATES = 1024
MAX_STATE_BYTES = 1 << 36
MAX_TOTAL_STATE_BYTES = 1 << 38
MAX_STATE_RANK = 8
STATE_UPDATES = ("functional", "in_place")
ALIAS_KINDS = ("kv_cache_update", "user")
SECTION_INIT_PREFIX = "section:"
_REQUIRED = ("fqn", "onnx_input", "onnx_output", "dtype", "shape", "init")
_OPTIONAL = ("update", "positions")


def _name(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v or len(v) > 1024 or any(ord(c) < 0x20 for c in v):
        raise BlobError(f"{where} must be a non-empty string (at most 1024 characters, no "
                        f"control characters), got {show(v)}")
    return v


def state_nbytes(entry: dict) -> int:
    n = DTYPE_ITEMSIZE[entry["dtype"]]
    for d in entry["shape"]:
        n *= d
    return n


def check_state(states: Any, bindings: list, key_info: dict | None) -> None:
    from .schema import check_object_keys

    if not isinstance(states, (list, tuple)):
        raise BlobError(f"'state' must be an array, got {type(states).__name__}")
    if len(states) > MAX_STATES:
        raise BlobError(f"'state' has {len(states)} entries, more than {MAX_STATES}")
    binding_names = {b["name"]: b for b in bindings}
    seen: dict[str, str] = {}
    total = 0
    for i, e in enumerate(states):
        where = f"state[{i}]"
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
            if name in binding_names:
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
        nbytes = state_nbytes(e)
        if nbytes > MAX_STATE_BYTES:
            raise BlobError(f"{where} ({e['fqn']!r}) would take {nbytes} bytes, more than the "
                            f"limit of {MAX_STATE_BYTES} per state")
        total += nbytes
        if total > MAX_TOTAL_STATE_BYTES:
            raise BlobError(f"the states take more than {MAX_TOTAL_STATE_BYTES} bytes together")
        init = e["init"]
        if init != "zeros" and not (isinstance(init, str) and init.startswith(
                SECTION_INIT_PREFIX) and len(init) > len(SECTION_INIT_PREFIX)):
            raise BlobError(f"{where}.init must be \"zeros\" or \"section:<name>\", "
                            f"got {show(init)}")
        if e.get("update", "functional") not in STATE_UPDATES:
            raise BlobError(f"{where}.update must be one of {list(STATE_UPDATES)}, "
                            f"got {show(e.get('update'))}")
        if "positions" in e:
            _check_positions(e["positions"], e, binding_names, where, key_info)


def _check_positions(p: Any, entry: dict, bindings: dict, where: str,
                     key_info: dict | None) -> None:
    from .schema import check_object_keys

    if not isinstance(p, dict) or set(p) != {"input", "axis"}:
        raise BlobError(f"{where}.positions must be an object with exactly 'input' and "
                        f"'axis', got {show(p)}")
    check_object_keys(p, f"{where}.positions", key_info)
    b = bindings.get(p["input"])
    if b is None or not b["is_input"]:
        raise BlobError(f"{where}.positions.input {show(p['input'])} names no input binding")
    if b["dtype"] not in ("int64", "torch.int64") or len(b["shape"]) != 1:
        raise BlobError(f"{where}.positions.input {p['input']!r} must be a 1-D int64 input, "
                        f"the binding is {show(b['dtype'])} {show(b['shape'])}")
    axis, rank = p["axis"], len(entry["shape"])
    if not is_int(axis) or not 1 <= axis < rank:
        raise BlobError(f"{where}.positions.axis must be an integer in [1, {rank - 1}] (an "
                        f"axis of the state, not the batch), got {show(axis)}")


def check_state_sections(meta: dict, section_sizes: dict[str, int]) -> None:
    """Each "section:<name>" initial value names a section of exactly the state's size."""
    for i, e in enumerate(meta.get("state", ())):
        init = e["init"]
        if init == "zeros":
            continue
        name = init[len(SECTION_INIT_PREFIX):]
        if name not in section_sizes:
            raise BlobError(f"state[{i}] ({e['fqn']!r}) takes its initial value from section "
                            f"{name!r}, which the blob does not have")
        if section_sizes[name] != state_nbytes(e):
            raise BlobError(f"state[{i}] ({e['fqn']!r}): section {name!r} holds "
                            f"{section_sizes[name]} bytes, the state is {state_nbytes(e)}")


def check_aliased_io(aliased: Any, bindings: list, key_info: dict | None) -> None:
    """Torch-TensorRT's pairs: both names are bindings (output, input), each output
    aliased once; "user" pairs have equal recorded shapes. Whether a
    "kv_cache_update" pair is the engine's own alias is checked at load."""
    from .schema import check_object_keys

    if not isinstance(aliased, list):
        raise BlobError(f"'aliased_io' must be an array, got {type(aliased).__name__}")
    by_name = {b["name"]: b for b in bindings}
    outputs: set[str] = set()
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
        out, inp = by_name.get(a["output"]), by_name.get(a["input"])
        if out is None or out["is_input"]:
            raise BlobError(f"{where}.output {show(a['output'])} names no output binding")
        if inp is None or not inp["is_input"]:
            raise BlobError(f"{where}.input {show(a['input'])} names no input binding")
        if a["output"] in outputs:
            raise BlobError(f"{where}: output {a['output']!r} is aliased twice")
        outputs.add(a["output"])
        if kind == "user" and out["shape"] != inp["shape"]:
            raise BlobError(f"{where}: a \"user\" alias needs equal shapes; output "
                            f"{a['output']!r} is {out['shape']}, input {a['input']!r} is "
                            f"{inp['shape']}")
        if out["dtype"] and inp["dtype"] and out["dtype"] != inp["dtype"]:
            raise BlobError(f"{where}: output {a['output']!r} is {out['dtype']}, input "
                            f"{a['input']!r} is {inp['dtype']}; an alias needs one dtype")
