"""Writes the C++ header of the TR01 constants the adapter's blob check needs.

    python gen_blob_constants.py SOURCE OUT_HEADER

SOURCE is the Python module that defines the blob format
(src/executorch_tensorrt/blob/format.py). Only literal
module-level assignments are read, with `ast` (nothing is imported or run):
MAGIC, HEADER_FORMAT, ALIGNMENT, and HEADER_SIZE when it is a literal
(otherwise it is struct.calcsize(HEADER_FORMAT)). The header field offsets
come from HEADER_FORMAT, which must still describe TR01's fields in order:
magic, metadata offset (u32), metadata size (u32), engine offset (u32),
engine size (u64), reserved bytes.
"""

from __future__ import annotations

import ast
import re
import struct
import sys
from pathlib import Path

NAMES = ("MAGIC", "MAGIC_ALIASED", "HEADER_FORMAT", "HEADER_SIZE", "ALIGNMENT")
# What blob_header.cpp reads, in order; each entry: (C name, struct code).
FIELDS = (("MAGIC", "s"), ("METADATA_OFFSET", "I"), ("METADATA_SIZE", "I"),
          ("ENGINE_OFFSET", "I"), ("ENGINE_SIZE", "Q"), ("RESERVED", "s"))


def read_constants(source: Path) -> dict:
    values: dict = {}
    for node in ast.parse(source.read_text(), str(source)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id not in NAMES:
            continue
        try:
            values[target.id] = ast.literal_eval(value)
        except ValueError:
            continue  # e.g. HEADER_SIZE = struct.calcsize(HEADER_FORMAT)
    missing = [n for n in ("MAGIC", "HEADER_FORMAT", "ALIGNMENT") if n not in values]
    if missing:
        raise SystemExit(f"gen_blob_constants: {', '.join(missing)} not defined as literals in "
                         f"{source}")
    return values


def header_text(values: dict, source: Path) -> str:
    magic, fmt, alignment = values["MAGIC"], values["HEADER_FORMAT"], values["ALIGNMENT"]
    codes = re.findall(r"(\d*)([a-zA-Z])", fmt.lstrip("<"))
    if not fmt.startswith("<") or [c for _, c in codes] != [c for _, c in FIELDS]:
        raise SystemExit(f"gen_blob_constants: HEADER_FORMAT {fmt!r} no longer has TR01's "
                         "fields (<magic s, u32, u32, u32, u64, reserved s>); update "
                         "native/src/blob_header.cpp and this script together")
    size = struct.calcsize(fmt)
    if values.get("HEADER_SIZE", size) != size:
        raise SystemExit(f"gen_blob_constants: HEADER_SIZE {values['HEADER_SIZE']} != "
                         f"struct.calcsize({fmt!r}) = {size}")
    if not isinstance(magic, bytes) or len(magic) != int(codes[0][0] or 1):
        raise SystemExit(f"gen_blob_constants: MAGIC {magic!r} does not fill the format's "
                         f"{codes[0][0]}s field")
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise SystemExit(f"gen_blob_constants: ALIGNMENT {alignment!r} is not a power of two")
    lines = [
        f"/* Generated from {source.name} by native/cmake/gen_blob_constants.py; do not edit. */",
        "#pragma once",
        "#include <cstdint>",
        "namespace etrt {",
        "namespace blob {",
        'constexpr char kMagic[] = "' + "".join(f"\\x{b:02x}" for b in magic) + '";',
        f"constexpr uint64_t kMagicSize = {len(magic)};",
        "/* Torch-TensorRT's TR02: the same layout, with aliased (in-place) outputs. */",
        'constexpr char kMagicAliased[] = "'
        + "".join(f"\\x{b:02x}" for b in values.get("MAGIC_ALIASED", magic)) + '";',
        f"constexpr uint64_t kHeaderSize = {size};",
        f"constexpr uint64_t kAlignment = {alignment};",
        f"/* Byte offset of each field in the header ({fmt!r}). */",
    ]
    offset = 0
    for (name, _), (count, code) in zip(FIELDS, codes):
        lines.append(f"constexpr uint64_t k{name.title().replace('_', '')}At = {offset};")
        offset += struct.calcsize("<" + count + code)
    lines += ["} // namespace blob", "} // namespace etrt", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, out = Path(argv[1]), Path(argv[2])
    text = header_text(read_constants(source), source)
    if not out.exists() or out.read_text() != text:  # keep the timestamp when unchanged
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
