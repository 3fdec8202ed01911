"""Can a KV cache be stored in fp8 inside a TensorRT partition? One cache
update and read (a layer's key cache [1, H, C, D] as fp8 state, new keys
written at `positions`, scores q @ k^T read from it) in five ONNX forms,
each built by TensorRT-RTX's CPU builder for SM89 (FP8 needs SM >= 8.9) and
SM86, and the forms that build run with onnxruntime over a whole decode
(C positions written one per call) against float32 and float16 references;
then a tiny Llama exported by llm.export with a float16 and an fp8 cache,
their memory reports compared; writes docs/evidence/kv-cache-fp8.md.

    nice -n 10 .venv/bin/python tools/bench/kv_cache_fp8.py [--no-write] [--no-llm]

Forms: "scatter-fp8" (quantize the new keys, ScatterElements into the fp8
cache), "tensorscatter-fp8" (the same with ONNX TensorScatter, the in-place
form the delegate uses for float caches), "dequantize-tensorscatter-quantize"
(TensorScatter into the dequantized cache), "dequantize-scatter-quantize"
(the fp8 cache dequantized whole, the new keys written in float16 with
ScatterElements, the cache requantized on the way out) and
"dequantize-scatter-rounded-quantize" (the same with the new keys rounded
to fp8 before the write: what llm.export(kv_cache_dtype="float8_e4m3fn")
writes, aot/state/fp8_cache.py). No engine is executed (no GPU here).
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

H, C, D, S = 4, 256, 64, 4
SCALE = 1.0               # the delegate's (aot/state/fp8_cache.py); keys ~N(0, 1)
FP8 = T.FLOAT8E4M3FN
FORMS = ("scatter-fp8", "tensorscatter-fp8", "dequantize-tensorscatter-quantize",
         "dequantize-scatter-quantize", "dequantize-scatter-rounded-quantize")


def model(form: str) -> bytes:
    ins = [h.make_tensor_value_info("k", T.FLOAT16, [1, H, "s", D]),
           h.make_tensor_value_info("pos", T.INT64, ["s"]),
           h.make_tensor_value_info("q", T.FLOAT16, [1, H, "s", D]),
           h.make_tensor_value_info("cache", FP8, [1, H, C, D])]
    outs = [h.make_tensor_value_info("scores", T.FLOAT16, [1, H, "s", C]),
            h.make_tensor_value_info("cache_out", FP8, [1, H, C, D])]
    inits = [nh.from_array(np.array(SCALE, np.float16), "scale"),
             nh.from_array(np.array([1, 1, -1, 1], np.int64), "shp")]
    index = [h.make_node("Reshape", ["pos", "shp"], ["p4"]),
             h.make_node("Shape", ["k"], ["kshape"]),
             h.make_node("Expand", ["p4", "kshape"], ["idx"])]
    read = [h.make_node("Transpose", ["k16"], ["kt"], perm=[0, 1, 3, 2]),
            h.make_node("MatMul", ["q", "kt"], ["scores"])]
    opset = 21
    if form.startswith("dequantize-"):
        rounded = form == "dequantize-scatter-rounded-quantize"
        write = (h.make_node("TensorScatter", ["c16", "k", "start"], ["k16"], axis=2)
                 if "tensorscatter" in form else
                 h.make_node("ScatterElements", ["c16", "idx", "kr" if rounded else "k"],
                             ["k16"], axis=2))
        nodes = index + [
            h.make_node("Slice", ["pos", "zero", "one"], ["start"]),
            h.make_node("DequantizeLinear", ["cache", "scale"], ["c16"]),
            *([h.make_node("QuantizeLinear", ["k", "scale"], ["k8"], output_dtype=FP8),
               h.make_node("DequantizeLinear", ["k8", "scale"], ["kr"])] if rounded else []),
            write,
            h.make_node("QuantizeLinear", ["k16", "scale"], ["cache_out"], output_dtype=FP8)]
        inits += [nh.from_array(np.array([0], np.int64), "zero"),
                  nh.from_array(np.array([1], np.int64), "one")]
        opset = 24 if "tensorscatter" in form else 21
    else:
        write = (h.make_node("ScatterElements", ["cache", "idx", "k8"], ["cache_out"], axis=2)
                 if form == "scatter-fp8" else
                 h.make_node("TensorScatter", ["cache", "k8", "start"], ["cache_out"], axis=2))
        nodes = index + [
            h.make_node("QuantizeLinear", ["k", "scale"], ["k8"], output_dtype=FP8),
            h.make_node("Slice", ["pos", "zero", "one"], ["start"]), write,
            h.make_node("DequantizeLinear", ["cache_out", "scale"], ["k16"])]
        inits += [nh.from_array(np.array([0], np.int64), "zero"),
                  nh.from_array(np.array([1], np.int64), "one")]
        opset = 24 if form == "tensorscatter-fp8" else 21
    graph = h.make_graph(nodes + read, form, ins, outs, inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m.SerializeToString()


def build(onnx_bytes: bytes, capability: str) -> str:
    import tensorrt_rtx as trt

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors = []

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.ERROR:
                self.errors.append(str(msg).split("\n")[0])

    logger = Logger()
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_bytes):
        return "parser refused: " + parser.get_error(0).desc().split("\n")[1 if "\n" in
                                                                   parser.get_error(0).desc() else 0]
    config = builder.create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.__members__[capability], 0)
    profile = builder.create_optimization_profile()
    for name in ("k", "q"):
        profile.set_shape(name, (1, H, 1, D), (1, H, S, D), (1, H, S, D))
    profile.set_shape("pos", (1,), (S,), (S,))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        return "builder refused: " + (logger.errors[-1] if logger.errors else "no message")
    return f"builds ({plan.nbytes} bytes)"


def decode(onnx_bytes: bytes) -> dict:
    """A prompt of S keys, then one per call to C positions; scores of the
    last call against float32 and float16 caches of the same keys."""
    import ml_dtypes
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    keys = rng.standard_normal((1, H, C, D)).astype(np.float16)
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    # numpy arrays of ml_dtypes' fp8 do not convert: the cache stays an OrtValue.
    cache = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        np.zeros((1, H, C, D), ml_dtypes.float8_e4m3fn).view(np.uint8), FP8)
    value = ort.OrtValue.ortvalue_from_numpy
    steps = [np.arange(S)] + [np.array([p]) for p in range(S, C)]
    for pos in steps:
        q = rng.standard_normal((1, H, len(pos), D)).astype(np.float16)
        scores, cache = session.run_with_ort_values(
            ["scores", "cache_out"], {"k": value(np.ascontiguousarray(keys[:, :, pos])),
                                      "pos": value(pos), "q": value(q), "cache": cache})
    scores = scores.numpy()
    exact = q.astype(np.float32) @ keys.astype(np.float32).transpose(0, 1, 3, 2)
    half = (q @ keys.transpose(0, 1, 3, 2)).astype(np.float32)
    got = scores.astype(np.float32)
    scale = float(np.abs(exact).max())
    return {"fp8_vs_fp32": float(np.abs(got - exact).max()) / scale,
            "fp16_vs_fp32": float(np.abs(half - exact).max()) / scale,
            "bytes_per_token_fp8": H * D * np.dtype(ml_dtypes.float8_e4m3fn).itemsize,
            "bytes_per_token_fp16": H * D * 2}


def llm_reports() -> list[str]:
    """A tiny float16 Llama exported twice by llm.export (a float16 cache, an
    fp8 one for SM89): their memory reports (what `inspect` prints)."""
    import tempfile

    from executorch_tensorrt import llm

    config = dict(model_type="llama", vocab_size=64, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256)
    rows = ["llm.export of a float16 Llama (2 layers, 2 KV heads of 16, 256 positions, "
            "SM89), as its memory report gives it:", "",
            "| KV cache | bytes/token | KV bytes | activation bytes |", "| --- | --- | --- | --- |"]
    per_token = {}
    with tempfile.TemporaryDirectory() as folder:
        for kv in (None, "float8_e4m3fn"):
            result = llm.export(config, max_seq_len=8, max_context_len=256, dtype="float16",
                                kv_cache_dtype=kv, compute_capabilities=("SM89",),
                                output=Path(folder) / f"llama-{kv}.pte", progress=None)
            m = result.memory
            per_token[kv] = m.kv.bytes_per_token
            rows.append(f"| {kv or 'float16'} | {m.kv.bytes_per_token} | {m.kv.total_bytes} | "
                        f"{m.activation_bytes} |")
    rows += ["", f"KV bytes per token, fp8 / float16: "
             f"{per_token['float8_e4m3fn'] / per_token[None]:.2f}"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--no-llm", action="store_true", help="skip the tiny Llama exports")
    args = parser.parse_args()
    import tensorrt_rtx

    lines = [f"# fp8 KV cache in a TensorRT partition ({datetime.date.today()})", "",
             f"`tools/bench/kv_cache_fp8.py`, TensorRT-RTX {tensorrt_rtx.__version__} (CPU "
             f"builder), one key cache [1, {H}, {C}, {D}] with per-tensor scale {SCALE}.", "",
             "| form | SM89 | SM86 |", "| --- | --- | --- |"]
    built = []
    for form in FORMS:
        data = model(form)
        results = [build(data, cc) for cc in ("SM89", "SM86")]
        lines.append(f"| {form} | {results[0]} | {results[1]} |")
        if results[0].startswith("builds"):
            built.append((form, data))
        print(form, results, flush=True)
    if built:
        lines += ["", f"onnxruntime, a decode filling all {C} positions (keys ~N(0, 1)): the "
                  "last call's scores, largest difference over the largest score:", ""]
    for form, data in built:
        r = decode(data)
        lines += [f"- `{form}`: fp8 cache vs float32 {r['fp8_vs_fp32']:.2e}; float16 cache "
                  f"vs float32 {r['fp16_vs_fp32']:.2e}; bytes per token per layer's key "
                  f"cache: fp8 {r['bytes_per_token_fp8']}, fp16 {r['bytes_per_token_fp16']} "
                  f"(ratio {r['bytes_per_token_fp8'] / r['bytes_per_token_fp16']:.2f})"]
        print(form, r)
    if not args.no_llm:
        lines += ["", *llm_reports()]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        out = Path(__file__).resolve().parents[2] / "docs/evidence/kv-cache-fp8.md"
        out.write_text(text)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
