"""compressed-tensors `pack-quantized` checkpoints -> PackedWeight.

Per quantized Linear: `weight_packed` int32 [out, ceil(in * bits / 32)] holds
the signed codes q in [-2**(bits-1), 2**(bits-1)) offset by 2**(bits-1), element
i at bit bits * i of its row (little-endian words); `weight_scale` [out, groups]
(or [out, 1] per channel, [1] per tensor); `weight_shape` [out, in]; asymmetric
schemes add `weight_zero_point` int32 packed the same way along outputs
([ceil(out * bits / 32), groups]). compressed-tensors dequantizes
(q - zero) * scale: our unsigned codes are the stored bits themselves, and the
zero point's stored bits are our zero point. Act-order 'group' checkpoints add
`weight_g_idx` [in] (input feature -> its group; codes stay in feature order):
compressed-tensors dequantized them by sorting the columns by g_idx, applying
the groups in order and sorting back, which is PackedWeight's input_order.
"""
from __future__ import annotations

import math
import re

import torch

from .common import Checkpoint, input_order_from_g_idx, make_packed, require, unpack_int32
from .safetensors_reader import SafetensorsFolder

PARTS = ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point", "weight_g_idx",
         "bias")
STRATEGIES = ("group", "channel", "tensor")
# 'group' / 'dynamic' / true store weight_g_idx; 'weight' / 'static' change calibration only
ACTORDERS = (None, False, True, "weight", "static", "group", "dynamic")
SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _schemes(qc: dict, where: str) -> list[tuple[list, dict]]:
    top = qc.get("format")
    groups = qc.get("config_groups")
    require(isinstance(groups, dict) and groups, where, "config_groups", repr(groups)[:60],
            "an object of quantization schemes")
    schemes = []
    for name, scheme in groups.items():
        at = f"{where} config_groups.{name}"
        require(isinstance(scheme, dict), at, "the scheme", type(scheme).__name__, "an object")
        fmt = scheme.get("format") or top
        require(fmt == "pack-quantized", at, "format", repr(fmt), "'pack-quantized'",
                "other compressed-tensors formats (int-quantized, float-quantized, "
                "nvfp4-pack-quantized, marlin-24, sparse) are not read")
        w = scheme.get("weights")
        require(isinstance(w, dict), at, "weights", repr(w)[:60], "an object of weight args")
        require(w.get("type", "int") == "int", at, "weights.type", repr(w.get("type")), "'int'")
        require(w.get("num_bits") in (4, 8), at, "weights.num_bits", w.get("num_bits"),
                "4 or 8", "TensorRT's weight-only GEMMs take int4 and int8 only")
        require(w.get("strategy") in STRATEGIES, at, "weights.strategy", repr(w.get("strategy")),
                f"one of {list(STRATEGIES)}", "block and token strategies are not read")
        require(w.get("actorder") in ACTORDERS, at, "weights.actorder", repr(w.get("actorder")),
                f"one of {list(ACTORDERS)}")
        require(not w.get("dynamic"), at, "weights.dynamic", w.get("dynamic"), "false")
        require(w.get("strategy") != "tensor" or w.get("symmetric", True), at,
                "weights.symmetric", False, "true for the tensor strategy")
        require(scheme.get("input_activations") is None, at, "input_activations",
                "set", "none (weight-only)", "TensorRT-RTX runs no int activations")
        targets = scheme.get("targets") or ["Linear"]
        require(isinstance(targets, list), at, "targets", repr(targets)[:60], "a list")
        schemes.append((targets, w))
    return schemes


def _matches(targets: list, module: str) -> bool:
    for t in targets:
        if t == "Linear" or t == module:
            return True
        if isinstance(t, str) and t.startswith("re:"):
            try:
                if re.match(t[3:], module):
                    return True
            except re.error as e:
                require(False, module, "a config group target", repr(t), "a valid regular "
                        f"expression after 're:' ({e})")
    return False


def read_compressed_tensors(files: SafetensorsFolder, config: dict, source: str) -> Checkpoint:
    qc = config["quantization_config"]
    schemes = _schemes(qc, f"{source} quantization_config")
    prefixes = sorted(n[: -len(".weight_packed")] for n in files.names()
                      if n.endswith(".weight_packed"))
    require(bool(prefixes), source, "the number of tensors named *.weight_packed", 0,
            "at least one in a pack-quantized checkpoint")
    result = Checkpoint(format="compressed-tensors", config=config)
    for prefix in prefixes:
        found = [w for targets, w in schemes if _matches(targets, prefix)]
        require(bool(found), prefix, "its scheme", "none", "a config group whose targets match")
        result.packed[prefix] = _layer(files, prefix, found[0])
    owned = {f"{p}.{part}" for p in prefixes for part in PARTS}
    for name in files.names():
        if name not in owned:
            result.tensors[name] = files.read(name)
    return result


def _layer(files: SafetensorsFolder, prefix: str, w: dict):
    bits, strategy, symmetric = w["num_bits"], w["strategy"], w.get("symmetric", True)
    shape_entry = files.entry(f"{prefix}.weight_shape")
    require(shape_entry.shape == (2,) and shape_entry.dtype in (torch.int32, torch.int64),
            f"{prefix}.weight_shape", "dtype and shape",
            f"{shape_entry.dtype} {list(shape_entry.shape)}", "an integer [2]")
    out_features, in_features = (int(v) for v in files.read(f"{prefix}.weight_shape"))
    require(0 < out_features < 2 ** 31 and 0 < in_features < 2 ** 31, f"{prefix}.weight_shape",
            "value", [out_features, in_features], "two positive sizes")
    words = math.ceil(in_features * bits / 32)
    packed = files.entry(f"{prefix}.weight_packed")
    require(packed.dtype == torch.int32 and packed.shape == (out_features, words),
            f"{prefix}.weight_packed", "dtype and shape", f"{packed.dtype} {list(packed.shape)}",
            f"torch.int32 {[out_features, words]} for weight_shape {[out_features, in_features]}"
            f" at {bits} bits")
    if strategy == "group":
        group = w.get("group_size")
        require(type(group) is int and group > 0 and in_features % group == 0, prefix,
                "weights.group_size", group, f"a positive divisor of in_features {in_features}")
        groups = in_features // group
    else:
        groups = 1
    scale_entry = files.entry(f"{prefix}.weight_scale")
    want = ((1,), ()) if strategy == "tensor" else ((out_features, groups),)
    require(scale_entry.dtype in SCALE_DTYPES and scale_entry.shape in want,
            f"{prefix}.weight_scale", "dtype and shape",
            f"{scale_entry.dtype} {list(scale_entry.shape)}",
            f"a float {list(want[0])} for the {strategy} strategy")
    scales = files.read(f"{prefix}.weight_scale").reshape(-1, groups).expand(out_features, groups)
    codes = unpack_int32(files.read(f"{prefix}.weight_packed"), bits, dim=1)[:, :in_features]
    order = _input_order(files, prefix, strategy, in_features, in_features // groups)
    zeros = None
    if not symmetric:
        zp_words = math.ceil(out_features * bits / 32)
        zp = files.entry(f"{prefix}.weight_zero_point")
        require(zp.dtype == torch.int32 and zp.shape == (zp_words, groups),
                f"{prefix}.weight_zero_point", "dtype and shape", f"{zp.dtype} {list(zp.shape)}",
                f"torch.int32 {[zp_words, groups]} (packed along outputs)")
        stored = files.read(f"{prefix}.weight_zero_point").t().contiguous()
        zeros = unpack_int32(stored, bits, dim=1)[:, :out_features].t()
    bias = None
    if f"{prefix}.bias" in files.where:
        entry = files.entry(f"{prefix}.bias")
        require(entry.dtype.is_floating_point and entry.shape == (out_features,),
                f"{prefix}.bias", "dtype and shape", f"{entry.dtype} {list(entry.shape)}",
                f"a float [{out_features}]")
        bias = files.read(f"{prefix}.bias")
    return make_packed(prefix, bits, codes, scales, zero_points=zeros, input_order=order,
                       bias=bias)


def _input_order(files: SafetensorsFolder, prefix: str, strategy: str, in_features: int,
                 group: int):
    """actorder 'group' (weight_g_idx: input feature -> its group; codes stay in
    feature order) as PackedWeight's input_order. compressed-tensors took a g_idx
    holding -1 as not yet calibrated: column order."""
    name = f"{prefix}.weight_g_idx"
    if name not in files.where:
        return None
    entry = files.entry(name)
    require(strategy == "group", name, "present for the strategy", repr(strategy),
            "the group strategy (act-order permutes groups)", "the checkpoint does not match "
            "its config")
    require(entry.shape == (in_features,) and not entry.dtype.is_floating_point, name,
            "dtype and shape", f"{entry.dtype} {list(entry.shape)}",
            f"an integer [{in_features}] (one group per input feature)")
    g_idx = files.read(name).to(torch.int64)
    unset = g_idx == -1
    if bool(unset.all()):
        return None
    require(not bool(unset.any()), name, "entries of -1", int(unset.sum()),
            "none or all (all -1: not calibrated, column order)", "the checkpoint is damaged")
    return input_order_from_g_idx(name, g_idx, in_features, group)
