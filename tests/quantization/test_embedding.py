"""Weight-only quantized embedding tables (quantization/embedding.py): the
ONNX graph has DequantizeLinear over the stored int4 / int8 table feeding
Gather's data input, TensorRT's parser takes it and the builder builds it,
onnxruntime computes the eager quantized module's rows, and what cannot be
quantized is refused with the layer named."""
from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
import torch

from executorch_tensorrt.aot.onnx.export import export_onnx
from executorch_tensorrt.quantization import QuantizationError, quantization_plan, quantize
from executorch_tensorrt.quantization.embedding import quantize_embeddings
from executorch_tensorrt.quantization.formats.int4 import Int4Embedding
from executorch_tensorrt.quantization.formats.int8 import Int8Embedding

VOCAB, DIM, GROUP = 96, 64, 32
IDS = torch.tensor([[0, 5, 95, 5, 17]])


class Lookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, ids):
        return self.head(self.embed(ids))


def _edge(module, args):
    from executorch.exir import EdgeCompileConfig, to_edge

    ep = torch.export.export(module.eval(), args)
    return to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)) \
        .exported_program()


@pytest.fixture(scope="module", params=["int4_weight_only", "int8_weight_only"])
def exported(request):
    scheme = request.param
    fp32 = Lookup()
    model = quantize_embeddings(quantize(fp32, scheme=scheme, group_size=GROUP), scheme, GROUP)
    onnx_bytes = export_onnx(_edge(model, (IDS,)), inline_weights=True).onnx_bytes
    return scheme, fp32, model, onnx_bytes


def test_the_table_is_stored_quantized_and_dequantized_into_gather(exported):
    scheme, fp32, model, onnx_bytes = exported
    assert isinstance(model.embed, Int4Embedding if scheme == "int4_weight_only" else Int8Embedding)
    assert isinstance(fp32.embed, torch.nn.Embedding)  # the model passed in is not changed
    graph = onnx.load_from_string(onnx_bytes).graph
    producer = {out: n for n in graph.node for out in n.output}
    gathers = [n for n in graph.node if n.op_type == "Gather"]
    assert len(gathers) == 1
    dq = producer[gathers[0].input[0]]
    assert dq.op_type == "DequantizeLinear"
    table = {t.name: t for t in graph.initializer}[dq.input[0]]
    want = onnx.TensorProto.INT4 if scheme == "int4_weight_only" else onnx.TensorProto.INT8
    assert table.data_type == want and list(table.dims) == [VOCAB, DIM]
    attrs = {a.name: a.i for a in dq.attribute}
    assert attrs == ({"axis": 1, "block_size": GROUP} if scheme == "int4_weight_only"
                     else {"axis": 0})
    lines = quantization_plan(model).layers
    assert lines["embed"].startswith(scheme.split("_")[0] + " weight-only embedding")
    assert "head" in lines


def test_onnxruntime_computes_the_eager_quantized_rows(exported):
    _, fp32, model, onnx_bytes = exported
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    got = torch.from_numpy(session.run(None, {name: IDS.numpy()})[0])
    with torch.no_grad():
        eager, eager_fp32 = model(IDS), fp32(IDS)
    diff = float((got - eager).abs().max())
    assert diff <= 1e-5
    assert float((eager - eager_fp32).abs().max()) > 100 * diff  # it is quantized


def test_tensorrt_parses_and_builds_dequantize_into_gather(exported):
    from executorch_tensorrt.tensorrt.engine_builder import build_engine
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    from executorch_tensorrt.tensorrt.onnx_parser import unsupported_nodes
    from executorch_tensorrt.tensorrt.options import BuildOptions

    scheme, _, _, onnx_bytes = exported
    assert unsupported_nodes(load_tensorrt(), onnx_bytes) == set()
    build_engine(onnx_bytes, BuildOptions(), label=scheme, progress=None, keep_engine=False)


def test_what_cannot_be_quantized_is_refused_naming_the_table():
    model = Lookup()
    model.embed.max_norm = 1.0
    with pytest.raises(QuantizationError, match="embedding 'embed': max_norm"):
        quantize_embeddings(model, "int4_weight_only", GROUP)
    odd = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 48))
    with pytest.raises(QuantizationError, match="group size 32 does not divide its 48"):
        quantize_embeddings(odd, "int4_weight_only", 32)
    with pytest.raises(QuantizationError, match="scheme 'fp8_w8a8' has no embedding path"):
        quantize_embeddings(Lookup(), "fp8_w8a8", GROUP)
    assert isinstance(odd[0], torch.nn.Embedding)  # nothing replaced on refusal
