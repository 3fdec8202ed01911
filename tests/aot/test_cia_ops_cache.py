"""torch's CIA-op set is built once per export (aot/trace/cia_ops_cache.py), rebuilt
when an operator is registered, and torch's own function is back afterwards."""
from __future__ import annotations

import torch
import torch._export.utils as torch_utils
import torch.export.decomp_utils as decomp_utils
import torch.export.exported_program as exported_program

from executorch_tensorrt.aot.trace.cia_ops_cache import cia_ops_cached


def test_built_once_per_block_and_equal_to_torchs(monkeypatch):
    calls = []
    original = torch_utils._collect_all_valid_cia_ops

    def counting():
        calls.append(1)
        return original()

    for module in (torch_utils, exported_program, decomp_utils):
        monkeypatch.setattr(module, "_collect_all_valid_cia_ops", counting)
    expected = original()
    with cia_ops_cached():
        sets = [exported_program._collect_all_valid_cia_ops(),
                decomp_utils._collect_all_valid_cia_ops(),
                torch_utils._collect_all_valid_cia_ops()]
    assert len(calls) == 1 and all(s == expected for s in sets)
    sets[0].clear()  # each caller owns its set: the cache is not emptied through it
    assert exported_program._collect_all_valid_cia_ops is counting  # restored
    with cia_ops_cached():
        assert exported_program._collect_all_valid_cia_ops() == expected


def test_an_operator_registered_inside_the_block_is_seen():
    with cia_ops_cached():
        before = exported_program._collect_all_valid_cia_ops()
        lib = torch.library.Library("etrt_cia_cache_test", "DEF")  # noqa: TOR901
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2, "CompositeImplicitAutograd")
        after = exported_program._collect_all_valid_cia_ops()
    op = torch.ops.etrt_cia_cache_test.scale.default
    assert op not in before and op in after


def test_an_export_inside_the_block_matches_one_outside(tmp_path):
    """ExecuTorch's lowering (several run_decompositions) gives the same graph."""
    from executorch.exir import to_edge_transform_and_lower

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(torch.nn.functional.linear(x, x)).softmax(-1)

    ep = torch.export.export(M(), (torch.randn(4, 4),))
    plain = str(to_edge_transform_and_lower(ep).exported_program().graph)
    with cia_ops_cached():
        cached = str(to_edge_transform_and_lower(ep).exported_program().graph)
    assert cached == plain
