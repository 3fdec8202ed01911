"""Model zoo (tests/aot/zoo.py): each model is exported once (real TensorRT-RTX engines),
then (1) TensorRT must take at least the model's coverage floor of its compute ops and
(2) the .pte run through executorch.runtime (TensorRT partitions on onnxruntime,
fallback allowed) must match eager PyTorch within the model's tolerance.

docs/coverage.md (tools/release/coverage_table.py) records what was measured."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from executorch.runtime import Runtime

import executorch_tensorrt
from executorch_tensorrt.program.info import read_program

import zoo

NAMES = [e.name for e in zoo.ZOO]


@pytest.fixture(scope="module")
def zoo_export(tmp_path_factory):
    """name -> (model, inputs, ExportResult); each model exported at most once."""
    out = tmp_path_factory.mktemp("zoo")
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            model, inputs = zoo.BY_NAME[name].build()
            result = executorch_tensorrt.export_program(model, inputs, out / f"{name}.pte",
                                                        progress=None)
            cache[name] = (model, inputs, result)
        return cache[name]

    return get


def test_zoo_is_complete():
    assert len(NAMES) >= 12 and len(set(NAMES)) == len(NAMES)
    # Third-party models, used as the library defines them: text encoder and
    # decoder, speech, vision (CNNs, Swin, segmentation, detection).
    assert len([e for e in zoo.ZOO if e.source == "transformers"]) >= 12
    for e in zoo.ZOO:
        assert 0.0 < e.coverage_floor <= 1.0 and 0.0 < e.atol <= 1e-3, e.name


@pytest.mark.parametrize("name", NAMES)
def test_coverage_floor(name, zoo_export):
    entry = zoo.BY_NAME[name]
    _, _, result = zoo_export(name)
    share, taken, total = zoo.coverage(result.partitioner.report)
    assert total > 0, f"{name}: the partitioner saw no compute ops"
    rejected = result.partitioner.report.rejected
    assert share >= entry.coverage_floor, (
        f"{name}: TensorRT took {taken}/{total} = {share:.3f} of the compute ops, floor "
        f"{entry.coverage_floor}; rejected: {dict(list(rejected.items())[:5])}")
    (method,) = read_program(result.path)
    n_trt = sum(d.backend == "TensorRTBackend" for d in method.delegates)
    assert n_trt == len(result.partitioner.report.partitions) >= 1
    if share == 1.0:
        assert method.operators == [], f"{name}: ops left outside TensorRT: {method.operators}"


@pytest.mark.parametrize("name", NAMES)
def test_pte_matches_eager(name, zoo_export, allow_fallback):
    entry = zoo.BY_NAME[name]
    model, inputs, result = zoo_export(name)
    method = Runtime.get().load_program(str(Path(result.path))).load_method("forward")
    got = method.execute(list(inputs))
    want = zoo.eager(model, inputs)  # a ModelOutput's leaves, in pytree order
    assert len(got) == len(want), f"{name}: {len(got)} outputs, eager has {len(want)}"
    for g, w in zip(got, want):
        assert torch.as_tensor(g).dtype == w.dtype, f"{name}: dtype {g.dtype} != {w.dtype}"
    diff = zoo.max_abs_diff(got, want)
    assert diff <= entry.atol, f"{name}: max |pte - eager| = {diff:.3g} > atol {entry.atol}"


@pytest.mark.parametrize("name", ["resnet_block", "causal_attention"])
def test_fp16_export_of_zoo_models_matches_eager(name, tmp_path, allow_fallback):
    """fp16 engines (docs/precision.md: 2e-3 relative to the largest output magnitude,
    about four fp16 roundings)."""
    entry = next(e for e in zoo.ZOO if e.name == name)
    model, inputs = entry.build()
    path = executorch_tensorrt.export(model, inputs, tmp_path / f"{name}.pte", progress=None,
                                      precision="fp16")
    (method,) = read_program(path)
    assert {d.metadata["precision"] for d in method.delegates} == {"fp16"}
    got = Runtime.get().load_program(str(path)).load_method("forward").execute(list(inputs))
    want = zoo.eager(model, inputs)
    scale = max(1.0, max(float(t.abs().max()) for t in want))
    assert zoo.max_abs_diff(got, want) <= 2e-3 * scale
