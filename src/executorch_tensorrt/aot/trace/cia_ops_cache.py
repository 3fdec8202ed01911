"""torch.export's set of preservable CompositeImplicitAutograd ops, computed
once per export instead of once per decomposition.

torch 2.13 rebuilds that set (`torch._export.utils._collect_all_valid_cia_ops`:
every registered operator namespace walked, the C++ registrations
materialized for each) in each `run_decompositions`, which ExecuTorch's
lowering runs 6-11 times per export. With transformers and torchao imported
(about 40 namespaces) one build is about 0.36 s: 18 % of a small zoo
model's export (docs/verification.md). The set only changes when an operator
is registered, so within one export it is kept under a key of the
dispatcher's CompositeImplicitAutograd registrations and the namespace list
(0.7 ms to read) and rebuilt when either changes. Outside an export torch's
own function runs; a torch without it is left as it is.
"""
from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

import torch

_NAME = "_collect_all_valid_cia_ops"
# torch's function, and the modules that imported it by name.
_MODULES = ("torch._export.utils", "torch.export.exported_program", "torch.export.decomp_utils")


def _key() -> tuple:
    return (tuple(torch.ops._dir),
            tuple(torch._C._dispatch_get_registrations_for_dispatch_key(
                "CompositeImplicitAutograd")))


@contextlib.contextmanager
def cia_ops_cached() -> Iterator[None]:
    """Within this block (one export), torch's CIA-op set is built once per
    set of registered operators (a nested block wraps the outer one's)."""
    modules = [importlib.import_module(name) for name in _MODULES]
    original = getattr(modules[0], _NAME, None)
    patched = [m for m in modules if original is not None and getattr(m, _NAME, None) is original]
    cache: dict[tuple, frozenset] = {}

    def cached() -> set:
        key = _key()
        if key not in cache:
            cache.clear()
            cache[key] = frozenset(original())
        return set(cache[key])  # torch's callers get their own set, as before

    for module in patched:
        setattr(module, _NAME, cached)
    try:
        yield
    finally:
        for module in patched:
            setattr(module, _NAME, original)
