"""Chains the edge dialect decomposes come back as single ONNX ops (onnx_fusions.py):
what the exporter writes for real modules, what onnxruntime computes from it
against eager, what TensorRT-RTX's parser and builder make of it, and the
chains that must stay as they are."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from executorch_tensorrt.aot.onnx.export import export_onnx
from executorch_tensorrt.aot.onnx.fusions import fuse


class GeluMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))


class RmsNorm(nn.Module):  # transformers' LlamaRMSNorm, written out
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):  # transformers' apply_rotary_pos_emb, half-split layout
    def forward(self, q, k, positions):
        inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
        freqs = positions[None, :, None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class Attention(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1) @ v


class Projections(nn.Module):
    """An attention block's Q/K/V projections of one input, split into heads
    (grouped-query: fewer K/V heads), with or without biases."""

    def __init__(self, bias: bool, heads: int = 4, kv_heads: int = 2, head_dim: int = 8):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q = nn.Linear(32, heads * head_dim, bias=bias)
        self.k, self.v = (nn.Linear(32, kv_heads * head_dim, bias=bias) for _ in range(2))

    def forward(self, x):
        b, s, _ = x.shape
        split = lambda t, h: t.view(b, s, h, self.head_dim).transpose(1, 2)  # noqa: E731
        return (split(self.q(x), self.heads), split(self.k(x), self.kv_heads),
                split(self.v(x), self.kv_heads))


def _edge(module, args):
    from executorch.exir import EdgeCompileConfig, to_edge

    ep = torch.export.export(module.eval(), args)
    return to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)) \
        .exported_program()


CASES = {
    "gelu": (GeluMlp, lambda: (torch.randn(2, 5, 16),), {"Gelu": 1}, {"Erf"}),
    "rms_norm": (RmsNorm, lambda: (torch.randn(2, 5, 16),), {"RMSNormalization": 1},
                 {"Pow", "ReduceMean", "Sqrt", "Reciprocal"}),
    "rotary": (Rotary, lambda: (torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8),
                                torch.arange(3, 9)), {"RotaryEmbedding": 2}, {"Neg", "Concat"}),
    # fusions: MatMul side by side, then Split below heads (projection_fusions.py)
    # (the edge dialect flattens x to 2-D first: one Reshape there, one into heads)
    "qkv_gemm": (lambda: Projections(bias=True), lambda: (torch.randn(2, 3, 32),),
                 {"Gemm": 1, "Split": 1, "Reshape": 2, "Transpose": 1}, set()),
    "qkv_grouped_no_bias": (lambda: Projections(bias=False), lambda: (torch.randn(2, 3, 32),),
                            {"MatMul": 1, "Split": 1, "Reshape": 1, "Transpose": 1}, {"Add"}),
    "batched_matmul": (Attention, lambda: (torch.randn(2, 4, 6, 8), torch.randn(2, 4, 7, 8),
                                           torch.randn(2, 4, 7, 8)), {"MatMul": 2}, {"Reshape"}),
}


@pytest.mark.parametrize("case", CASES)
def test_a_decomposed_chain_exports_as_one_op_that_computes_what_eager_does(case):
    make, inputs, expected, gone = CASES[case]
    torch.manual_seed(0)
    module, args = make(), inputs()
    exported = export_onnx(_edge(module, args), inline_weights=True)
    model = onnx.load_from_string(exported.onnx_bytes)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert all(ops[op] == n for op, n in expected.items()), ops
    assert not gone & set(ops), ops
    # The fused node maps back to an edge node (debug handles, the partition report).
    fused = [i for i, n in enumerate(model.graph.node) if n.op_type in expected]
    assert all(i in exported.edge_node_of for i in fused), exported.edge_node_of

    session = ort.InferenceSession(exported.onnx_bytes, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    got = session.run(None, feeds)
    want = module(*args)
    for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_tensorrt_parses_and_builds_the_fused_ops(case):
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    from executorch_tensorrt.tensorrt.onnx_parser import unsupported_nodes
    from executorch_tensorrt.tensorrt.options import BuildOptions

    make, inputs, _, _ = CASES[case]
    onnx_bytes = export_onnx(_edge(make(), inputs()), inline_weights=True).onnx_bytes
    trt = load_tensorrt()
    assert unsupported_nodes(trt, onnx_bytes) == set()
    build_engine(onnx_bytes, BuildOptions(), label=case, progress=None, keep_engine=False)


# -- chains that must stay ------------------------------------------------------
def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def _gelu_model(*, expose_erf: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["a", "half"], ["m"]),
             helper.make_node("Mul", ["x", "m"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]
    if expose_erf:
        outputs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [3]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [3])], outputs,
                              [_const("sqrt2", 2 ** 0.5), _const("one", 1.0),
                               _const("half", 0.5)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _run(model: onnx.ModelProto, feeds: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def test_a_chain_whose_middle_is_read_elsewhere_is_left_as_it_is():
    fused = ir.serde.deserialize_model(_gelu_model(expose_erf=False))
    assert fuse(fused)["Gelu"] == 1
    kept = ir.serde.deserialize_model(_gelu_model(expose_erf=True))
    assert fuse(kept)["Gelu"] == 0
    assert [n.op_type for n in kept.graph] == ["Div", "Erf", "Add", "Mul", "Mul"]
    x = {"x": np.array([-1.0, 0.3, 2.0], np.float32)}
    np.testing.assert_allclose(_run(ir.serde.serialize_model(fused), x)[0],
                               _run(_gelu_model(expose_erf=False), x)[0], rtol=1e-6)


def _rotary_model(*, duplicated: bool) -> onnx.ModelProto:
    """x * cos + rotate_half(x) * sin with cos/sin = op(Concat(f, g)); the
    half-split layout needs g == f, which RotaryEmbedding assumes."""
    f = "f" if duplicated else "g"
    nodes = [helper.make_node("Concat", ["f", f], ["cat"], axis=-1),
             helper.make_node("Cos", ["cat"], ["cos"]), helper.make_node("Sin", ["cat"], ["sin"]),
             helper.make_node("Unsqueeze", ["cos", "one"], ["c4"]),
             helper.make_node("Unsqueeze", ["sin", "one"], ["s4"]),
             helper.make_node("Mul", ["x", "c4"], ["xc"]),
             helper.make_node("Slice", ["x", "zero", "two", "last"], ["lo"]),
             helper.make_node("Slice", ["x", "two", "big", "last"], ["hi"]),
             helper.make_node("Neg", ["hi"], ["nh"]),
             helper.make_node("Concat", ["nh", "lo"], ["rot"], axis=-1),
             helper.make_node("Mul", ["rot", "s4"], ["rs"]),
             helper.make_node("Add", ["xc", "rs"], ["y"])]
    ints = [numpy_helper.from_array(np.array(v, np.int64), n)
            for n, v in (("one", [1]), ("zero", [0]), ("two", [2]), ("big", [2 ** 62]),
                         ("last", [-1]))]
    value = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)  # noqa: E731
    graph = helper.make_graph(nodes, "g", [value("x", [1, 2, 3, 4]), value("f", [1, 3, 2]),
                                           value("g", [1, 3, 2])],
                              [value("y", [1, 2, 3, 4])], ints)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]))


def test_rotary_is_fused_only_when_each_frequency_is_there_twice():
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32)
             for n, s in (("x", (1, 2, 3, 4)), ("f", (1, 3, 2)), ("g", (1, 3, 2)))}
    for duplicated in (True, False):
        original = _rotary_model(duplicated=duplicated)
        model = ir.serde.deserialize_model(original)
        assert fuse(model)["RotaryEmbedding"] == (1 if duplicated else 0)
        np.testing.assert_allclose(_run(ir.serde.serialize_model(model), feeds)[0],
                                   _run(original, feeds)[0], rtol=1e-5, atol=1e-6)


def _projections_model(head_dims: tuple[int, int, int]) -> onnx.ModelProto:
    """What a decoder with a dynamic sequence gets (the CachedDecoder's Q/K/V):
    3-D MatMul + bias Add per projection, Reshape to heads, Transpose."""
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for name, head_dim in zip("qkv", head_dims):
        inits += [_const(f"w_{name}", rng.standard_normal((32, 16))),
                  _const(f"b_{name}", rng.standard_normal(16)),
                  numpy_helper.from_array(np.array([1, -1, 16 // head_dim, head_dim], np.int64),
                                          f"shape_{name}")]
        nodes += [helper.make_node("MatMul", ["x", f"w_{name}"], [f"mm_{name}"]),
                  helper.make_node("Add", [f"mm_{name}", f"b_{name}"], [f"lin_{name}"]),
                  helper.make_node("Reshape", [f"lin_{name}", f"shape_{name}"], [f"heads_{name}"],
                                   allowzero=1),  # as the exporter writes it
                  helper.make_node("Transpose", [f"heads_{name}"], [name], perm=[0, 2, 1, 3])]
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 5, 32])], outputs, inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


@pytest.mark.parametrize("head_dims", [(8, 8, 8), (8, 8, 4)])
def test_projections_of_one_input_become_one_matmul_and_split_below_the_heads(head_dims):
    """Equal head sizes: MatMul, Add, Reshape, Transpose, Split (5 nodes for 12).
    Unequal ones keep a Reshape and Transpose per projection after the Split."""
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    from executorch_tensorrt.tensorrt.onnx_parser import unsupported_nodes
    from executorch_tensorrt.tensorrt.options import BuildOptions

    original = _projections_model(head_dims)
    model = ir.serde.deserialize_model(original)
    counts = fuse(model)
    sunk = head_dims[0] == head_dims[2]
    assert (counts["MatMul side by side"], counts["Split below heads"]) == (1, int(sunk))
    ops = collections.Counter(n.op_type for n in model.graph)
    assert ops == ({"MatMul": 1, "Add": 1, "Reshape": 1, "Transpose": 1, "Split": 1} if sunk else
                   {"MatMul": 1, "Add": 1, "Split": 1, "Reshape": 3, "Transpose": 3}), ops
    fused = ir.serde.serialize_model(model)
    x = {"x": np.random.default_rng(1).standard_normal((1, 5, 32)).astype(np.float32)}
    for got, want in zip(_run(fused, x), _run(original, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    onnx_bytes = fused.SerializeToString()
    assert unsupported_nodes(load_tensorrt(), onnx_bytes) == set()
    build_engine(onnx_bytes, BuildOptions(), label="projections", progress=None,
                 keep_engine=False)


# -- decoder rules (decoder_fusions.py) ----------------------------------------------------
def _graph_model(nodes, inputs, outputs, inits=(), opset=24) -> onnx.ModelProto:
    value = lambda n, t, s: helper.make_tensor_value_info(n, t, s)  # noqa: E731
    graph = helper.make_graph(nodes, "g", [value(*i) for i in inputs],
                              [value(*o) for o in outputs], list(inits))
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _masked_softmax_model(*, expose: str | None = None, equal_to: float = -np.inf):
    """The edge dialect's safe softmax over a masked score, as the exporter
    writes it for transformers' decoders (zeros as Expand(0, Shape(softmax)))."""
    nodes = [helper.make_node("Softmax", ["x"], ["sm"], axis=-1),
             helper.make_node("Equal", ["x", "inf"], ["eq"]),
             helper.make_node("Not", ["eq"], ["ne"]),
             helper.make_node("Cast", ["ne"], ["ne_i"], to=TensorProto.INT64),
             helper.make_node("ReduceMax", ["ne_i", "last"], ["any_i"], keepdims=1),
             helper.make_node("Cast", ["any_i"], ["any"], to=TensorProto.BOOL),
             helper.make_node("Not", ["any"], ["masked"]),
             helper.make_node("Shape", ["sm"], ["shape"]),
             helper.make_node("Expand", ["zero", "shape"], ["zeros"]),
             helper.make_node("Where", ["masked", "zeros", "sm"], ["y"])]
    outputs = [("y", TensorProto.FLOAT, [4, 5])]
    if expose:
        outputs.append((expose, TensorProto.BOOL, None))
    return _graph_model(nodes, [("x", TensorProto.FLOAT, [4, 5])], outputs,
                        [_const("inf", equal_to), _const("zero", 0.0),
                         numpy_helper.from_array(np.array([-1], np.int64), "last")])


def _build(model: onnx.ModelProto, label: str) -> None:
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    from executorch_tensorrt.tensorrt.onnx_parser import unsupported_nodes
    from executorch_tensorrt.tensorrt.options import BuildOptions

    onnx_bytes = model.SerializeToString()
    assert unsupported_nodes(load_tensorrt(), onnx_bytes) == set()
    build_engine(onnx_bytes, BuildOptions(), label=label, progress=None, keep_engine=False)


def test_a_masked_safe_softmax_keeps_its_values_for_masked_and_nan_rows_in_four_nodes():
    inf, nan = np.inf, np.nan
    x = {"x": np.array([[0.5, -1.0, 2.0, -inf, 0.0],      # partly masked
                        [-inf] * 5,                         # fully masked: 0, not NaN
                        [nan, -inf, -inf, -inf, -inf],      # NaN stays NaN
                        [1.0, inf, 0.0, -inf, 3.0]], np.float32)}  # +inf: NaN as before
    original = _masked_softmax_model()
    model = ir.serde.deserialize_model(original)
    assert fuse(model)["masked Softmax shortened"] == 1
    fused = ir.serde.serialize_model(model)
    assert collections.Counter(n.op_type for n in fused.graph.node) == \
        {"Softmax": 1, "ReduceMax": 1, "Equal": 1, "Where": 1}
    got, want = _run(fused, x)[0], _run(original, x)[0]
    np.testing.assert_array_equal(got, want)  # NaN where the original has NaN, nowhere else
    assert not np.isnan(want[1]).any() and np.isnan(want[2]).all()
    _build(fused, "masked softmax")


@pytest.mark.parametrize("kept", ["an intermediate read elsewhere", "a test against +inf"])
def test_a_masked_softmax_that_differs_is_left_as_it_is(kept):
    original = _masked_softmax_model(expose="any") if kept.startswith("an") \
        else _masked_softmax_model(equal_to=np.inf)
    model = ir.serde.deserialize_model(original)
    assert fuse(model)["masked Softmax shortened"] == 0
    # (the last Not may still fold into the Where: Where(c, b, a) is exact)
    assert {"Cast", "Shape", "Expand"} <= {n.op_type for n in model.graph}


def _silu_model(gate: str, expose_sigmoid: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", [gate, "s"], ["y"])]
    outputs = [("y", TensorProto.FLOAT, [2, 8])] + \
        ([("s", TensorProto.FLOAT, [2, 8])] if expose_sigmoid else [])
    return _graph_model(nodes, [("x", TensorProto.FLOAT, [2, 8]), ("z", TensorProto.FLOAT, [2, 8])],
                        outputs)


def test_silu_becomes_swish_and_other_gates_stay():
    feeds = {n: np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32) * 8
             for i, n in enumerate("xz")}
    original = _silu_model("x")
    model = ir.serde.deserialize_model(original)
    assert fuse(model)["Swish"] == 1
    moved = ir.serde.deserialize_model(_graph_model(original.graph.node, [
        ("x", TensorProto.FLOAT, [2, 8]), ("z", TensorProto.FLOAT, [2, 8])],
        [("y", TensorProto.FLOAT, [2, 8])], opset=18))  # the exporter's opset: moved to 24
    assert fuse(moved)["Swish"] == 1 and moved.opset_imports[""] == 24
    fused = ir.serde.serialize_model(model)
    assert [n.op_type for n in fused.graph.node] == ["Swish"]
    np.testing.assert_array_equal(_run(fused, feeds)[0], _run(original, feeds)[0])
    _build(fused, "swish")
    for kept in (_silu_model("z"), _silu_model("x", expose_sigmoid=True),  # z * sigmoid(x)
                 _graph_model(_silu_model("x").graph.node,  # opset 17: not moved to 24
                              [("x", TensorProto.FLOAT, [2, 8]), ("z", TensorProto.FLOAT, [2, 8])],
                              [("y", TensorProto.FLOAT, [2, 8])], opset=17)):
        model = ir.serde.deserialize_model(kept)
        assert fuse(model).get("Swish", 0) == 0
        assert [n.op_type for n in model.graph] == ["Sigmoid", "Mul"]


def test_an_identity_between_nodes_and_a_negated_where_condition_go():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i"]),
             helper.make_node("Greater", ["i", "zero"], ["c"]),
             helper.make_node("Not", ["c"], ["n"]),
             helper.make_node("Where", ["n", "x", "i"], ["y"]),
             helper.make_node("Identity", ["y"], ["out"])]  # a graph output: stays
    original = _graph_model(nodes, [("x", TensorProto.FLOAT, [6])],
                            [("out", TensorProto.FLOAT, [6])], [_const("zero", 0.5)])
    model = ir.serde.deserialize_model(original)
    counts = fuse(model)
    assert (counts["Identity dropped"], counts["Not folded into Where"]) == (1, 1)
    fused = ir.serde.serialize_model(model)
    assert [n.op_type for n in fused.graph.node] == ["Relu", "Greater", "Where", "Identity"]
    x = {"x": np.array([-1.0, 0.2, 0.5, 0.7, np.nan, 3.0], np.float32)}
    np.testing.assert_array_equal(_run(fused, x)[0], _run(original, x)[0])
    # A Not that something other than a Where's condition reads stays.
    nodes[4] = helper.make_node("Where", ["n", "x", "n_f"], ["y"])
    kept = _graph_model([*nodes, helper.make_node("Cast", ["n"], ["n_f"], to=TensorProto.FLOAT)],
                        [("x", TensorProto.FLOAT, [6])], [("out", TensorProto.FLOAT, [6])],
                        [_const("zero", 0.5)])
    assert fuse(ir.serde.deserialize_model(kept))["Not folded into Where"] == 0


def _grouped_values_model(*, expose_expand: bool = False, heads: bool = True) -> onnx.ModelProto:
    """probabilities [1, 4, S, 6] @ a value cache [1, 2, 6, 8] repeated for 2
    query heads per cache head, as transformers' repeat_kv exports (3-D bmm)."""
    ints = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    nodes = [helper.make_node("Unsqueeze", ["v", "two"], ["vu"]),
             helper.make_node("Expand", ["vu", "repeat"], ["ve"]),
             helper.make_node("Reshape", ["ve", "flat_v"], ["vr"]),
             helper.make_node("Reshape", ["p", "flat_p"], ["pr"]),
             helper.make_node("MatMul", ["pr", "vr"], ["o3"]),
             helper.make_node("Reshape", ["o3", "heads"], ["y"])][:None if heads else -1]
    outputs = [("y", TensorProto.FLOAT, [1, 4, "S", 8]) if heads else
               ("o3", TensorProto.FLOAT, [4, "S", 8])] + \
        ([("ve", TensorProto.FLOAT, [1, 2, 2, 6, 8])] if expose_expand else [])
    return _graph_model(nodes, [("p", TensorProto.FLOAT, [1, 4, "S", 6]),
                                ("v", TensorProto.FLOAT, [1, 2, 6, 8])], outputs,
                        [ints("two", [2]), ints("repeat", [1, 2, 2, 6, 8]),
                         ints("flat_v", [4, 6, 8]), ints("flat_p", [4, -1, 6]),
                         ints("heads", [1, 4, -1, 8])])


@pytest.mark.parametrize("heads", [True, False], ids=["then heads", "3-D out"])
def test_grouped_value_heads_are_read_by_broadcasting_with_the_same_products(heads):
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.options import BuildOptions, InputProfile

    original = _grouped_values_model(heads=heads)
    model = ir.serde.deserialize_model(original)
    assert fuse(model)["grouped values broadcast"] == 1
    fused = ir.serde.serialize_model(model)
    # (Unsqueeze, Expand, Reshape, Reshape, MatMul [, Reshape]): the product goes
    # into the heads' Reshape directly, or back to 3-D through one
    assert [n.op_type for n in fused.graph.node] == ["Unsqueeze", "Reshape", "MatMul", "Reshape"]
    rng = np.random.default_rng(0)
    for s in (1, 3):  # matrix by matrix the same [S, 6] @ [6, 8]: bitwise equal
        feeds = {"p": rng.random((1, 4, s, 6), np.float32),
                 "v": rng.standard_normal((1, 2, 6, 8)).astype(np.float32)}
        np.testing.assert_array_equal(_run(fused, feeds)[0], _run(original, feeds)[0])
    build_engine(fused.SerializeToString(), BuildOptions(), label="grouped values",
                 profiles=[InputProfile((1, 4, 1, 6), (1, 4, 2, 6), (1, 4, 4, 6)),
                           InputProfile((1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8))],
                 progress=None, keep_engine=False)
    kept = ir.serde.deserialize_model(_grouped_values_model(expose_expand=True))
    assert fuse(kept)["grouped values broadcast"] == 0
    assert "Expand" in [n.op_type for n in kept.graph]
