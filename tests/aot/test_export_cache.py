"""The partitioner's ONNX exports reach preprocess through an explicit cache
(aot/onnx/export_cache.py): named in the delegation spec by id, taken once,
bounded, gone with its partitioner."""
from __future__ import annotations

import gc

import torch
from executorch.exir._serialize._program import deserialize_pte_binary

from executorch_tensorrt.aot.compile_spec import EXPORT_CACHE_KEY, TensorRTCompileSpec
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.aot.onnx.export import OnnxExport
from executorch_tensorrt.aot.onnx.export_cache import OnnxExportCache, cache_named_in


class TwoPartitions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.b(torch.sigmoid(self.a(x)))


def test_export_reuses_each_checked_partition_once_and_frees_the_rest(tmp_path):
    result = export_program(TwoPartitions().eval(), (torch.randn(2, 16),), tmp_path / "m.pte",
                            progress=None, exclude_ops={"aten.sigmoid.default"})
    cache = result.partitioner.export_cache
    partitions = sum(len(r.partitions) for r in result.partitioner.reports)
    assert partitions == 2
    assert cache.offered >= partitions and cache.reused == partitions  # no second export
    assert len(cache) == 0  # taken by preprocess or cleared after lowering
    program = deserialize_pte_binary(result.path.read_bytes()).program
    delegates = [d for plan in program.execution_plan for d in plan.delegates]
    assert len(delegates) == 2
    for d in delegates:
        specs = {s.key: bytes(s.value) for s in d.compile_specs}
        assert specs[EXPORT_CACHE_KEY] == cache.id.encode()
        # The other specs still read as the engine options (the key is skipped).
        TensorRTCompileSpec.from_compile_specs(d.compile_specs)


def _program(width: int) -> torch.export.ExportedProgram:
    return torch.export.export(torch.nn.Linear(width, 2), (torch.randn(1, width),))


def test_cache_is_bounded_and_lives_as_long_as_its_owner():
    cache = OnnxExportCache(max_entries=2)
    programs = [_program(w) for w in (3, 4, 5)]
    export = OnnxExport(b"graph", {}, [])
    for ep in programs:
        cache.offer(ep, "fp32", export)
    assert len(cache) == 2 and cache.offered == 3
    assert cache.take(programs[0], "fp32") is None  # the oldest went first
    assert cache.take(programs[2], "fp32").onnx_bytes == b"graph"
    spec = cache.compile_spec()
    assert cache_named_in([spec]) is cache
    assert cache_named_in([]) is None
    del cache
    gc.collect()
    assert cache_named_in([spec]) is None  # the registry holds caches weakly
