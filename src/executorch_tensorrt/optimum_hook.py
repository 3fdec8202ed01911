"""Registers the `tensorrt` recipe with optimum-executorch when its recipe
registry is imported, so that after `import executorch_tensorrt`
`optimum.exporters.executorch.main_export(..., recipe="tensorrt")` works.

optimum-executorch finds recipes only by importing the modules of its own
`recipes/` package into a module-level dict (`recipe_registry.recipe_registry`),
so a recipe from another package has to be put into that dict. Importing
optimum here would cost every `import executorch_tensorrt` seconds (it imports
transformers and torch), so nothing is imported now: a finder on
`sys.meta_path` waits for the registry module and registers the recipe right
after that module runs (or at once, if it is already imported). The recipe
itself lives in llm/optimum_recipe.py and is imported only then.
"""
from __future__ import annotations

import importlib
import importlib.abc
import sys

REGISTRY = "optimum.exporters.executorch.recipe_registry"


def _register(registry) -> None:
    recipe = importlib.import_module("executorch_tensorrt.llm.optimum_recipe")
    recipe.register(registry)


class _RegisterAfterLoad(importlib.abc.Loader):
    """The registry's own loader, then our registration."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _register(module)


class _RegistryFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RegisterAfterLoad(spec.loader)
                return spec
        return None  # not installed: the import fails as it would without us


def install() -> None:
    """Idempotent; `import executorch_tensorrt` calls it."""
    if REGISTRY in sys.modules:
        _register(sys.modules[REGISTRY])
    elif not any(isinstance(f, _RegistryFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegistryFinder())
