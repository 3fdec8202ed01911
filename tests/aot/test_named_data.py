"""Weights in ExecuTorch's named data (issue 11): stored once, keyed by
content, out of every protobuf; .pte + .ptd; the inline opt-in; progress.

These check the written program (blobs, named data, files); running such
programs through the fallback is the runtime's side (tests/runtime)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from executorch.exir._serialize._program import deserialize_pte_binary
from onnx import TensorProto, helper

from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.aot.checks.memory_check import check_export_memory
from executorch_tensorrt.aot.weights.named_data import store_weights
from executorch_tensorrt.aot.weights.content import INLINE_LIMIT, Weight
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.blob.format import NAMED_DATA_LOCATION
from executorch_tensorrt.errors import ExportError
from helpers import tensorrt_blobs


class Mlp(torch.nn.Module):
    def __init__(self, width: int = 256, layers: int = 3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class SharedTwice(torch.nn.Module):
    """One Linear used on both sides of an op TensorRT is told to leave:
    two partitions, one weight."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(128, 128)

    def forward(self, x):
        return self.lin(torch.sigmoid(self.lin(x)))


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def program_named_data(pte: Path) -> tuple[list[str], int]:
    """The named-data keys stored in the .pte and how many buffers hold them."""
    named = deserialize_pte_binary(pte.read_bytes()).named_data
    if named is None:
        return [], 0
    return list(named.pte_data), len(named.buffers)


def blobs(pte: Path):
    return [read_blob(b) for b in tensorrt_blobs(pte)]


def test_onnx_section_is_the_graph_alone_and_lists_every_weight(tmp_path):
    model = Mlp().eval()
    result = export_program(model, (torch.randn(2, 256),), tmp_path / "m.pte", progress=None)
    (blob,) = blobs(result.path)
    meta = blob.metadata
    assert meta["weights_location"] == "named_data" and meta["engine"] == "none"
    assert blob.engine == b""
    graph = onnx.load_model_from_string(blob.onnx).graph
    external = {}
    for init in graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            assert [(e.key, e.value) for e in init.external_data] == [
                ("location", NAMED_DATA_LOCATION)]
            assert not init.raw_data
            external[init.name] = init
        else:  # only small constants stay inline
            assert len(init.raw_data) < INLINE_LIMIT
    listed = {w["name"]: w for w in meta["weights"]}
    assert set(listed) == set(external) and len(listed) == 6
    assert sum(w["nbytes"] for w in listed.values()) == weight_bytes(model)
    # No protobuf carries the weights: the ONNX section is a tiny part of them.
    assert len(blob.onnx) < weight_bytes(model) / 100
    # Every key is a named-data entry of the program, which holds each weight once.
    keys, _ = program_named_data(result.path)
    assert {w["key"] for w in listed.values()} <= set(keys)
    assert all(w["key"] == "etrt." + w["key"][5:] and len(w["key"]) == 69
               for w in listed.values())
    assert result.path.stat().st_size < weight_bytes(model) * 1.02


def test_a_weight_shared_by_two_partitions_is_stored_once(tmp_path):
    model = SharedTwice().eval()
    result = export_program(model, (torch.randn(4, 128),), tmp_path / "m.pte", progress=None,
                            exclude_ops={"aten.sigmoid.default"})
    parts = blobs(result.path)
    assert len(parts) == 2
    key_sets = [{w["key"] for w in b.metadata["weights"] if w["nbytes"] >= INLINE_LIMIT}
                for b in parts]
    assert key_sets[0] == key_sets[1] and len(key_sets[0]) == 1  # the 64 KiB weight
    keys, buffers = program_named_data(result.path)
    # the weight once (the 512-byte bias stays inline in each ONNX graph)
    assert len(keys) == 1 and buffers == 1, keys
    assert result.path.stat().st_size < weight_bytes(model) * 1.3  # not twice


@pytest.mark.parametrize("external", [False, True])
def test_two_methods_sharing_a_linear_store_it_once(tmp_path, external):
    model = Mlp(width=512, layers=2).eval()
    methods = {"prefill": torch.export.export(model, (torch.randn(8, 512),)),
               "decode": torch.export.export(model, (torch.randn(1, 512),))}
    result = export_program(methods, None, tmp_path / "two.pte", progress=None,
                            external_weights=external)
    per_method = [sorted(w["key"] for w in b.metadata["weights"]) for b in blobs(result.path)]
    assert len(per_method) == 2 and per_method[0] == per_method[1]
    assert len(per_method[0]) == 4  # two weights, two 2 KiB biases
    if external:
        # One buffer per weight for both methods: the .ptd is the weights once.
        (ptd,) = result.data_paths
        assert weight_bytes(model) <= ptd.stat().st_size < weight_bytes(model) * 1.02
        assert result.path.stat().st_size < 64 * 1024
    else:
        keys, buffers = program_named_data(result.path)
        assert sorted(keys) == per_method[0] and buffers == 4
        assert result.path.stat().st_size < weight_bytes(model) * 1.02


def test_store_keeps_equal_bytes_once():
    a = torch.arange(1024, dtype=torch.float32)
    weights = [Weight("a", a, "float32", (1024,), 4096),
               Weight("b", a.clone(), "float32", (1024,), 4096),
               Weight("c", a + 1, "float32", (1024,), 4096)]
    stored = store_weights(weights, None)
    out = stored.store.get_named_data_store_output()
    assert len(out.buffers) == 2
    assert stored.entries[0]["key"] == stored.entries[1]["key"] != stored.entries[2]["key"]


def test_external_weights_write_pte_and_ptd_beside_it(tmp_path):
    model = Mlp().eval()
    result = export_program(model, (torch.randn(2, 256),), tmp_path / "net.pte", progress=None,
                            external_weights=True)
    assert result.data_paths == [tmp_path / "net.ptd"]
    assert (tmp_path / "net.ptd").stat().st_size >= weight_bytes(model)
    assert result.path.stat().st_size < 64 * 1024
    keys, _ = program_named_data(result.path)
    assert keys == []  # all of them are in the .ptd


def test_inline_weights_keep_the_self_contained_blob(tmp_path):
    model = Mlp().eval()
    result = export_program(model, (torch.randn(2, 256),), tmp_path / "m.pte", progress=None,
                            inline_weights=True)
    (blob,) = blobs(result.path)
    assert blob.metadata["engine"] == "full" and blob.engine[:4] == b"vtrt"
    assert "weights" not in blob.metadata
    assert blob.metadata.get("weights_location", "inline") == "inline"
    graph = onnx.load_model_from_string(blob.onnx).graph
    assert all(i.data_location != TensorProto.EXTERNAL for i in graph.initializer)
    assert sum(len(i.raw_data) for i in graph.initializer) == weight_bytes(model)
    assert program_named_data(result.path)[0] == []
    with pytest.raises(ValueError, match="contradict"):
        export_program(model, (torch.randn(2, 256),), tmp_path / "x.pte", progress=None,
                       inline_weights=True, external_weights=True)


def test_fp16_stores_the_converted_weights_and_leaves_the_model_alone(tmp_path):
    model = Mlp().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = export_program(model, (torch.randn(2, 256),), tmp_path / "m.pte", progress=None,
                            precision="fp16")
    (blob,) = blobs(result.path)
    listed = blob.metadata["weights"]
    assert {w["dtype"] for w in listed} == {"float16"}
    # the fp16 weights of 1 KiB or more (the 512-byte fp16 biases stay inline)
    assert sum(w["nbytes"] for w in listed) == 3 * 256 * 256 * 2
    # The export shares the model's weights (no copy) and never writes to them.
    assert all(torch.equal(v, before[k]) and v.dtype == torch.float32
               for k, v in model.state_dict().items())
    assert result.expected_path is not None


def test_progress_names_each_stage(tmp_path):
    lines: list[str] = []
    export_program(SharedTwice().eval(), (torch.randn(4, 128),), tmp_path / "m.pte",
                   progress=lines.append, exclude_ops={"aten.sigmoid.default"},
                   external_weights=True)
    text = "\n".join(lines)
    for want in ("torch.export", "export needs about", "partition 0 (", "partition 1 (",
                 "exporting a TensorRT partition", "weights (", "named data in m.ptd",
                 "wrote ", "m.ptd ("):
        assert want in text, (want, text)


def test_export_fails_early_when_memory_clearly_will_not_do(monkeypatch):
    from executorch_tensorrt.aot.checks import memory_check

    state = [{"w": torch.zeros(1 << 20)}]  # 4 MiB of weights
    monkeypatch.setattr(memory_check, "available_bytes", lambda: 1 << 20)
    with pytest.raises(ExportError, match=r"check_memory=False"):
        check_export_memory(state, False, None)
    monkeypatch.setattr(memory_check, "available_bytes", lambda: 1 << 30)
    check_export_memory(state, False, None)


def test_weights_mapped_from_a_checkpoint_file_are_estimated_apart(monkeypatch):
    """A checkpoint transformers loads in its own dtype stays mapped from its
    safetensors file: the kernel can drop and re-read those pages, so the
    export's need for them is its working memory (MAPPED_FACTOR), not 1x."""
    from safetensors.torch import save_file
    from transformers.modeling_utils import load_state_dict

    from executorch_tensorrt.aot.checks import memory_check

    # Beside the tests, on disk: a tmpfs /tmp would hold the file in memory.
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as folder:
        path = Path(folder) / "model.safetensors"
        save_file({"w": torch.ones(1 << 20, dtype=torch.bfloat16),  # 2 MiB each
                   "v": torch.ones(1 << 20, dtype=torch.bfloat16)}, str(path))
        mapped = load_state_dict(str(path))
        in_memory = {"u": torch.ones(1 << 19)}  # 2 MiB
        weights = memory_check.weight_bytes([mapped, in_memory])
        assert (weights.total, weights.mapped) == (6 << 20, 4 << 20)
        # 2 MiB x 1.0 + 4 MiB x 0.25 = 3 MiB fits 3.2 MiB (x MARGIN); 6 MiB would not.
        monkeypatch.setattr(memory_check, "available_bytes", lambda: int(3.2 * (1 << 20)))
        check_export_memory([mapped, in_memory], False, None)
        with pytest.raises(ExportError, match=r"mapped from files x 0.25"):
            check_export_memory([mapped, {"u": torch.ones(1 << 20)}], False, None)
        # Inline weights are copied whatever backs them: the inline factor for all.
        with pytest.raises(ExportError, match=r"with inline_weights"):
            check_export_memory([mapped, in_memory], True, None)
        del mapped


def test_parser_support_query_works_on_a_graph_without_weights():
    """unsupported_nodes() on an ONNX graph whose weight is EXTERNAL still
    covers the supported nodes and names the unsupported one."""
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    from executorch_tensorrt.tensorrt.onnx_parser import parse_network, unsupported_nodes

    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[64, 64])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=NAMED_DATA_LOCATION)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 64])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]),
             helper.make_node("NoSuchOp", ["y"], ["z"], domain="example.custom")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [z], [w]),
                              opset_imports=[helper.make_opsetid("", 18),
                                             helper.make_opsetid("example.custom", 1)])
    trt = load_tensorrt()
    assert unsupported_nodes(trt, model.SerializeToString()) == {1}
    # The MatMul alone parses with its weight read from our memory.
    nodes.pop()
    alone = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 18)])
    data = np.ones((64, 64), np.float32)
    _b, network, _p, _l = parse_network(trt, alone.SerializeToString(),
                                        [("W", data.ctypes.data, data.nbytes)])
    assert network.num_outputs == 1


def test_no_stripped_plan_without_a_usable_gpu():
    """engine "stripped" only where TensorRT builds one: here (no GPU) the probe
    says no and the blob ships no plan, as the first test checks."""
    from executorch_tensorrt.aot.backend import _stripped_plans_build, engine_kind
    from executorch_tensorrt.aot.compile_spec import TensorRTCompileSpec
    from executorch_tensorrt.runtime.cuda.probe import cuda_unavailable_reason

    spec = TensorRTCompileSpec()
    if cuda_unavailable_reason() is None:
        pytest.skip("a GPU is visible: the probe's answer depends on it")
    assert _stripped_plans_build(spec.build_options()) is False
    assert engine_kind(spec) == "none"
    assert engine_kind(TensorRTCompileSpec(inline_weights=True)) == "full"


@pytest.mark.parametrize("inline", [False, True])
def test_one_engine_build_per_partition(tmp_path, inline):
    """The partitioner's check build is the only one: with no plan shipped,
    preprocess builds nothing; with a plan shipped (inline_weights here, a
    stripped plan on a GPU), the check builds with the real weights and
    preprocess takes that engine from the cache."""
    model = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.Sigmoid(),
                                torch.nn.Linear(64, 32)).eval()
    lines: list[str] = []
    result = export_program(model, (torch.randn(4, 128),), tmp_path / "m.pte",
                            progress=lines.append, exclude_ops={"aten.sigmoid.default"},
                            inline_weights=inline)
    builds = [line for line in lines if line.startswith("building TensorRT engine")]
    assert len(builds) == 2 and all("for partition" in b for b in builds), lines
    kinds = {b.metadata["engine"] for b in blobs(result.path)}
    assert kinds == ({"full"} if inline else {"none"})


def test_preprocess_reuses_an_export_only_over_the_very_same_weights():
    """The partitioner's export of a partition is reused for the same graph over
    the same tensors, never over other weights (same shapes, other values)."""
    import copy

    from executorch_tensorrt.aot.onnx.export import export_onnx
    from executorch_tensorrt.aot.onnx.export_cache import OnnxExportCache

    cache = OnnxExportCache()
    ep = torch.export.export(Mlp().eval(), (torch.randn(2, 256),))
    exported = export_onnx(ep)
    cache.offer(ep, "fp32", exported)
    other = copy.deepcopy(ep)  # equal graph, cloned weights
    assert cache.take(other, "fp32") is None
    cache.offer(ep, "fp32", exported)
    again = cache.take(ep, "fp32")
    assert again is not None and again.onnx_bytes == exported.onnx_bytes
    assert all(a.value is b.value for a, b in zip(again.weights, exported.weights))
    assert cache.take(ep, "fp32") is None  # taken once
    cache.offer(ep, "fp16", exported)  # converted weights are never kept
    assert cache.take(ep, "fp16") is None
