"""An fp8 (e4m3) KV cache: each delegate-owned cache stored as float8_e4m3fn
with one per-tensor scale of 1.0, half an fp16 cache's bytes (docs/llm.md).

TensorRT-RTX 1.7 takes one form of the write (tools/bench/kv_cache_fp8.py):
the whole cache dequantized, the new entries written in float with
ScatterElements, the result quantized back. It refuses TensorScatter on an fp8
cache, TensorScatter on a dequantized one ("The cache tensor must be a network
input") and ScatterElements into the fp8 tensor. So, per cache, the partition's
ONNX model becomes:

    state_in (fp8) -> DequantizeLinear -> ScatterElements(update rounded to fp8)
                   -> readers (attention), and -> QuantizeLinear -> state_out (fp8)

The update is rounded to fp8 (QuantizeLinear + DequantizeLinear) before it is
written, so every value the scatter outputs is already an fp8 value: the
final quantize changes nothing, and the readers see exactly what the cache
holds. That also makes the state safe to bind in place (one buffer as input
and output): whichever positions a kernel reads before or after the output
is written, it reads the same values, and the written positions are
overwritten by the scatter anyway.

Scale 1.0, saturating: keys and values beyond +-448 (e4m3's largest) are
clipped, values below 2^-9 flush to zero; no calibration.
"""
from __future__ import annotations

import copy

import onnx
from onnx import TensorProto, helper

from ...errors import ExportError
from ..onnx.state_markers import MARKER_DOMAIN, MARKER_OP
from .kv_update import raise_opset, replace_nodes
from .lifted import LiftedProgram

#: llm.export(kv_cache_dtype=...) values; the blob records the state as "float8".
KV_CACHE_DTYPES = ("float8_e4m3fn",)
FP8_SCALE = 1.0
#: QuantizeLinear's output_dtype attribute (fp8 without a zero-point tensor).
FP8_OPSET = 21
#: The compute capability FP8 needs (TensorRT-RTX refuses older targets).
FP8_MIN_CAPABILITY = 89


def check_kv_cache_dtype(value: str | None) -> str | None:
    """The canonical kv_cache_dtype ("fp8" is accepted for "float8_e4m3fn")."""
    if value is None:
        return None
    name = {"fp8": "float8_e4m3fn", "float8": "float8_e4m3fn"}.get(str(value).lower(), value)
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype={value!r} is not supported; use None (the model's "
                         f"dtype) or 'float8_e4m3fn' ('fp8')")
    return name


def fp8_refusal(capabilities) -> str | None:
    """Why an fp8 cache cannot be built for these targets, or None."""
    low = [c for c in capabilities or () if int(str(c).upper().removeprefix("SM"))
           < FP8_MIN_CAPABILITY]
    if not low:
        return None
    return (f"an fp8 KV cache needs compute capability SM{FP8_MIN_CAPABILITY} or newer (FP8), "
            f"but the engine targets {', '.join(low)}; pass compute_capabilities with only "
            f"SM{FP8_MIN_CAPABILITY}+ targets (e.g. ('SM89', 'SM120', 'SM121')) or drop "
            "kv_cache_dtype")


def quantize_caches(model: onnx.ModelProto, lifted: LiftedProgram, entries: list[dict],
                    edge_node_of: dict[int, str]) -> dict[int, str]:
    """Rewrites every state's cache write (its kv_cache_update marker) into the
    fp8 form above, in place on `model`; the entries become dtype "float8",
    "rewrite_in_place". Returns the node map for the rewritten model. A float
    state that is not such a cache is refused (ExportError)."""
    g = model.graph
    markers = {n.input[0]: n for n in g.node if n.domain == MARKER_DOMAIN and n.op_type == MARKER_OP}
    for state, entry in zip(lifted.states, entries):
        kv = state.kv_update
        if state.init.is_floating_point() and (
                kv is None or not kv.scatter or entry["onnx_input"] not in markers):
            raise ExportError(
                f"kv_cache_dtype float8_e4m3fn: state {state.fqn!r} ({entry['dtype']} "
                f"{entry['shape']}) is not written as a KV cache (one write at contiguous "
                "positions along axis 2 of a [batch, heads, length, head_dim] buffer, read only "
                "by that write), so it cannot be stored in fp8; export without kv_cache_dtype")
    count = len(g.node)
    raise_opset(model, FP8_OPSET)
    g = model.graph  # the converter replaced the graph message
    if len(g.node) != count:
        edge_node_of = {}
    old_nodes = [copy.deepcopy(n) for n in g.node]
    index_of = {id(n): i for i, n in enumerate(old_nodes)}
    head, tail, scales = [], [], {}
    replaced: dict[int, list] = {}
    for state, entry in zip(lifted.states, entries):
        if not state.init.is_floating_point():
            continue
        value_in = next(v for v in g.input if v.name == entry["onnx_input"])
        value_out = next(v for v in g.output if v.name == entry["onnx_output"])
        float_type = value_in.type.tensor_type.elem_type
        scale = scales.get(float_type)
        if scale is None:
            scale = scales[float_type] = f"kv_cache_fp8.scale.{float_type}"
            g.initializer.append(helper.make_tensor(scale, float_type, [], [FP8_SCALE]))
        src, dst = entry["onnx_input"], entry["onnx_output"]
        src_f, dst_f = src + ".dequantized", dst + ".dequantized"
        # The graph output's producer now writes the float value; fp8 comes after.
        for node in old_nodes:
            node.output[:] = [dst_f if o == dst else o for o in node.output]
            node.input[:] = [dst_f if i == dst else (src_f if i == src else i)
                             for i in node.input]
        for v in g.value_info:
            if v.name == dst:
                v.name = dst_f
        head.append(helper.make_node("DequantizeLinear", [src, scale], [src_f]))
        tail.append(helper.make_node("QuantizeLinear", [dst_f, scale], [dst],
                                     output_dtype=TensorProto.FLOAT8E4M3FN))
        value_in.type.tensor_type.elem_type = TensorProto.FLOAT8E4M3FN
        value_out.type.tensor_type.elem_type = TensorProto.FLOAT8E4M3FN
        marker = next(n for n in old_nodes
                      if n.domain == MARKER_DOMAIN and n.op_type == MARKER_OP and n.input[0] == src_f)
        replaced[index_of[id(marker)]] = _rounded_scatter(g, marker, scale,
                                                          state.kv_update.axis)
        entry["dtype"], entry["update"] = "float8", "rewrite_in_place"
    new_nodes, new_map = list(head), {}
    for i, node in enumerate(old_nodes):
        group = replaced.get(i, [node])
        if i in edge_node_of:
            for k in range(len(group)):
                new_map[len(new_nodes) + k] = edge_node_of[i]
        new_nodes.extend(group)
    new_nodes.extend(tail)
    replace_nodes(model, new_nodes)
    return new_map


def _rounded_scatter(g: onnx.GraphProto, marker: onnx.NodeProto, scale: str,
                     axis: int) -> list[onnx.NodeProto]:
    """The marker's write as nodes TensorRT builds: the update rounded to fp8,
    written with ScatterElements at `positions` along `axis` (every other
    index of the update's shape kept), into the marker's output."""
    past, update, positions = marker.input
    base = marker.output[0]
    rank = _rank(g, past)
    shape = base + ".positions_shape"
    g.initializer.append(helper.make_tensor(
        shape, TensorProto.INT64, [rank], [-1 if d == axis else 1 for d in range(rank)]))
    return [
        helper.make_node("QuantizeLinear", [update, scale], [base + ".update_fp8"],
                         output_dtype=TensorProto.FLOAT8E4M3FN),
        helper.make_node("DequantizeLinear", [base + ".update_fp8", scale],
                         [base + ".update_rounded"]),
        helper.make_node("Reshape", [positions, shape], [base + ".positions"]),
        helper.make_node("Shape", [update], [base + ".update_shape"]),
        helper.make_node("Expand", [base + ".positions", base + ".update_shape"],
                         [base + ".indices"]),
        helper.make_node("ScatterElements", [past, base + ".indices", base + ".update_rounded"],
                         [base], axis=axis),
    ]


def _rank(g: onnx.GraphProto, name: str) -> int:
    for v in list(g.input) + list(g.value_info) + list(g.output):
        if v.name in (name, name.removesuffix(".dequantized")):
            return len(v.type.tensor_type.shape.dim)
    raise ValueError(f"no shape recorded for the cache value {name!r}")
