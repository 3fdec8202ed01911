"""Static import rules of the package, read from the source tree with `ast`.

Every import counts, function-local and type-only ones too (a function-local
import is still an edge a reader has to follow). Used by test_layering.py over
the real tree and over small planted trees, so the checker itself can fail.
"""
from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

PACKAGE = "executorch_tensorrt"

# Order set from the real import graph (2026-12-01): a package may import only
# packages of a lower or equal level. tensorrt sits below blob (blob/metadata_profiles.py
# reads tensorrt.options.MAX_OPTIMIZATION_PROFILES) and runtime below program
# (program/info.py reads runtime.arguments.SCALAR_TYPE_TO_NUMPY).
LEVELS = {
    "": 0, "__init__": 0, "errors": 0, "dtypes": 0,
    "tensorrt": 1, "blob": 2, "runtime": 3, "program": 4,
    "aot": 5, "quantization": 5, "llm": 6, "examples": 6,
    "cli": 7, "__main__": 8,
}
RUNTIME_FORBIDDEN = (f"{PACKAGE}.aot", f"{PACKAGE}.quantization", f"{PACKAGE}.cli",
                     "executorch.exir", "torch")


@dataclass(frozen=True)
class Edge:
    importer: str  # dotted module name
    imported: str  # dotted module (or module.attribute) name
    line: int


def module_name(path: pathlib.Path, src_root: pathlib.Path) -> str:
    parts = list(path.relative_to(src_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_edges(src_root: pathlib.Path, package: str = PACKAGE) -> list[Edge]:
    """Every import in every module under src_root/package (relative ones resolved)."""
    edges = []
    for path in sorted((src_root / package).rglob("*.py")):
        name = module_name(path, src_root)
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges += [Edge(name, alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parent = base[:len(base) - (node.level - 1)]
                    target = ".".join(parent + ([node.module] if node.module else []))
                else:
                    target = node.module
                edges.append(Edge(name, target, node.lineno))
                edges += [Edge(name, f"{target}.{alias.name}", node.lineno)
                          for alias in node.names if alias.name != "*"]
    return edges


def top_package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(edges: list[Edge], package: str = PACKAGE) -> list[str]:
    """The rules broken by these edges, one readable line each."""
    found = set()
    for edge in edges:
        src = top_package(edge.importer)
        where = f"{edge.importer}:{edge.line} imports {edge.imported}"
        if src == "runtime" and any(_within(edge.imported, f.replace(PACKAGE, package))
                                    for f in RUNTIME_FORBIDDEN):
            found.add(f"runtime/ never imports aot, quantization, cli, exir or torch: {where}")
        if not _within(edge.imported, package):
            continue
        dst = top_package(edge.imported)
        if dst == "cli" and src not in ("cli", "__main__"):
            found.add(f"nothing imports cli/: {where}")
        # The package root imports what registration needs; a name that is no
        # subpackage (`__version__`) is an attribute of the root.
        if src and src != dst and LEVELS.get(dst, 0) > LEVELS.get(src, 99):
            found.add(f"upward import ({src} below {dst}): {where}")
    return sorted(found)
