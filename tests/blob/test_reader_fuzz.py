"""The two readers against each other on a few thousand mutated blobs; the C++
validator also runs under AddressSanitizer and UBSan.

read_blob checks the whole format, the adapter's C++ validator at least the
fixed header and regions: whatever C++ refuses, Python refuses too, and
neither crashes nor trips a sanitizer.
"""

from __future__ import annotations

import json
import random
import struct

from blob_cases import (
    FMT,
    GOOD,
    HEADER_MALFORMED,
    METADATA_MALFORMED,
    SEC,
    TAIL,
    VALID,
    binding,
    blob,
    entry_text,
    meta_blob,
    py_check,
    sections_blob,
)
from upstream_blobs import torch_tensorrt_style_blob


# ----------------------------------------------------------------- sanitizers and fuzzing


def _seed_blobs() -> list[bytes]:
    return [
        GOOD,
        blob.write_blob(b"ENGINE" * 7, {"io_bindings": [binding("a"), binding("b", "int64", [-1])],
                                        "device_id": 0, "trt_version": "1.7"}, b"onnx-bytes" * 3,
                        sections={"x": b"y" * 20}),
        blob.write_blob(b"E", {"io_bindings": [binding("a", shape=[-1, 2])],
                                "profiles": [{"name": "a", "min": [1, 2], "opt": [2, 2],
                                              "max": [4, 2]}], "precision": "fp16"}),
        sections_blob([{"name": "onnx", "offset": SEC, "size": 16},
                       {"name": "more", "offset": SEC + 16, "size": 16}], TAIL),
        torch_tensorrt_style_blob(),
        meta_blob(entry_text('{"name":"caf\\u00e9","dtype":"float32","shape":[1],"is_input":true}')),
    ]


_INTERESTING = [0, 1, 15, 16, 31, 32, 33, 48, 1024, 1056, 1568, 2**31, 2**32 - 16, 2**32 - 1,
                2**63, 2**64 - 16, 2**64 - 1]
_JSON_BYTES = b'{}[]",:-0123456789.eEtfnu\\ \x00\x7f\xff\xc3'


def _mutate(rng: random.Random, data: bytes) -> bytes:
    d = bytearray(data)
    kind = rng.randrange(8)
    if kind == 0 and d:  # flip bytes anywhere
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(len(d))] = rng.randrange(256)
    elif kind == 1:  # header field set to an interesting value
        field, width = rng.choice([(4, 4), (8, 4), (12, 4), (16, 8)])
        v = rng.choice(_INTERESTING) % (1 << (8 * width))
        if len(d) >= 32:
            d[field:field + width] = v.to_bytes(width, "little")
    elif kind == 2:  # truncate
        d = d[:rng.randrange(len(d) + 1)]
    elif kind == 3:  # extend
        d += bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    else:  # edit the metadata text and fix up the header so it still frames it
        if len(d) < 32:
            return bytes(d)
        _, mo, ms, eo, es, res = struct.unpack_from(FMT, d)
        if not (32 <= mo and mo + ms <= eo <= len(d)):
            return bytes(d)
        text = bytearray(d[mo:mo + ms])
        if not text:
            return bytes(d)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text))
            op = rng.randrange(4)
            if op == 0:
                text[i] = rng.choice(_JSON_BYTES)
            elif op == 1:
                text.insert(i, rng.choice(_JSON_BYTES))
            elif op == 2 and len(text) > 1:
                del text[i]
            else:
                j = min(len(text), i + rng.randint(1, 12))
                text[i:i] = text[i:j]
        # keep the engine and anything after it where it was, if the text fits
        if mo + len(text) <= eo:
            text += b" " * (eo - mo - len(text)) if rng.random() < 0.5 else b""
            d = d[:mo] + text + b"\0" * (eo - mo - len(text)) + d[eo:]
            d[8:12] = len(text).to_bytes(4, "little")
        else:
            new_eo = (mo + len(text) + 15) // 16 * 16
            d = d[:mo] + text + b"\0" * (new_eo - mo - len(text)) + d[eo:]
            d[8:12] = len(text).to_bytes(4, "little")
            d[12:16] = new_eo.to_bytes(4, "little")
    return bytes(d)


def _structured_case(rng: random.Random) -> bytes:
    """Valid-looking metadata with a few values replaced by odd ones."""
    odd = [0, -1, -2, 1, 16, SEC, SEC + 8, SEC + 16, 2**31, -(2**31) - 1, 2**63, 2**64 - 1, 2**64,
           1.5, float(SEC), "", "x", "onnx", "float32", "torch.float32", "int4", "a\nb", True,
           False, None, [], {}, [1, -1], [-2], {"name": "x"}, [{"name": "y", "offset": SEC}]]

    def pick():
        return json.loads(json.dumps(rng.choice(odd)))  # a fresh copy

    meta: dict = {"io_bindings": [binding(n, is_input=rng.random() < 0.5)
                                  for n in rng.sample("abcd", rng.randrange(4))]}
    if rng.random() < 0.6:
        meta["sections"], off = [], SEC
        for n in rng.sample(["onnx", "more", "x"], rng.randrange(1, 3)):
            size = rng.choice([0, 1, 16, 20])
            meta["sections"].append({"name": n, "offset": off, "size": size})
            off = (off + size + 15) // 16 * 16
    for k in ("aliased_io", "hardware_compatible", "device_id"):
        if rng.random() < 0.2:
            meta[k] = pick()
    for _ in range(rng.randint(1, 3)):
        node = meta
        for _ in range(rng.randrange(4)):  # walk down to a random container
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys or not isinstance(node[k := rng.choice(keys)], (dict, list)):
                break
            node = node[k]
        if isinstance(node, dict):
            if node and rng.random() < 0.3:
                del node[rng.choice(list(node))]
            else:
                node[rng.choice(list(node) + ["name", "offset", "size", "z"])] = pick()
        elif node and rng.random() < 0.5:
            node[rng.randrange(len(node))] = pick()
        else:
            node.append(pick())
    text = json.dumps(meta, separators=(",", ":"))
    if rng.random() < 0.1:
        text = text.replace('"name":', '"name":"q","name":', 1)
    return meta_blob(text, tail=bytes(rng.randrange(256) for _ in range(rng.choice([0, 16, 64]))))


def test_fuzz_python_and_cpp_agree(cpp_check, sanitized_check):
    rng = random.Random(20240611)
    seeds = _seed_blobs()
    cases = [d for _, d, _ in HEADER_MALFORMED + METADATA_MALFORMED] + [d for _, d in VALID] + seeds
    for _ in range(6000):
        data = rng.choice(seeds)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            data = _mutate(rng, data)
        cases.append(data)
    cases += [_structured_case(rng) for _ in range(3000)]
    disagreements = []
    py = [py_check(d) for d in cases]
    asan = sanitized_check(cases)
    valid = 0
    for data, p, a in zip(cases, py, asan):
        c = cpp_check(data)
        # the same C++ verdict with and without sanitizers; C++ never accepts
        # less than Python (the adapter must not refuse a blob read_blob takes)
        if (c is None) != (a is None) or (p is None and c is not None):
            disagreements.append((data[:200], p, c))
        valid += p is None
    assert not disagreements, f"{len(disagreements)} disagreements, first: {disagreements[:3]}"
    # the mutations reach both verdicts
    assert 100 < valid < len(cases) - 1000, valid
