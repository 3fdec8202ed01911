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

# Order set from the real import graph (2026-12-02): a package may import only
# packages of a lower or equal level. tensorrt sits below blob
# (blob/metadata_profiles.py reads tensorrt.options.MAX_OPTIMIZATION_PROFILES);
# program (reading programs and reporting on them) sits above runtime: its
# memory report states what the onnxruntime fallback holds, which only the
# runtime knows (runtime/onnxruntime/host_memory.py); runtime never imports it.
# examples sits above llm: the example decoders use the product's
# transformers wrapper (llm/hf_export.py), and the product never imports an example.
LEVELS = {
    "": 0, "__init__": 0, "errors": 0, "dtypes": 0, "optimum_hook": 0, "output_files": 0,
    "tensorrt": 1, "blob": 2, "runtime": 3, "program": 4,
    "aot": 5, "quantization": 5, "deploy": 5, "llm": 6, "examples": 7,
    "cli": 8, "__main__": 9,
}
RUNTIME_FORBIDDEN = (f"{PACKAGE}.aot", f"{PACKAGE}.quantization", f"{PACKAGE}.cli",
                     "executorch.exir", "torch")
# The two executors share only what sits beside them in runtime/.
EXECUTOR_FOLDERS = ("runtime.tensorrt", "runtime.onnxruntime")
# Test-only hooks (the GPU stand-in) stay off the product path: only the
# executor choice asks them, and only whether a test set one.
TEST_HOOKS, TEST_HOOKS_USERS = "runtime.testing", ("runtime.choose",)
# A quantization format is reached through the registry (its steps, loaded by
# the module path the registry names), never imported by name.
FORMATS_FOLDER = "quantization.formats"


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
        importer, imported = (m.split(".", 1)[-1] for m in (edge.importer, edge.imported))
        for a, b in (EXECUTOR_FOLDERS, EXECUTOR_FOLDERS[::-1]):
            if _within(importer, a) and _within(imported, b):
                found.add(f"the TensorRT and onnxruntime executors never import each other: {where}")
        if _within(imported, TEST_HOOKS) and importer not in (TEST_HOOKS, *TEST_HOOKS_USERS):
            found.add(f"only runtime/choose.py asks the test-only hooks: {where}")
        if (_within(imported, FORMATS_FOLDER) and not _within(importer, FORMATS_FOLDER)
                and imported != FORMATS_FOLDER):
            found.add(f"formats are reached through the quantization registry: {where}")
        dst = top_package(edge.imported)
        if dst == "cli" and src not in ("cli", "__main__"):
            found.add(f"nothing imports cli/: {where}")
        # The package root imports what registration needs; a name that is no
        # subpackage (`__version__`) is an attribute of the root.
        if src and src != dst and LEVELS.get(dst, 0) > LEVELS.get(src, 99):
            found.add(f"upward import ({src} below {dst}): {where}")
    return sorted(found)


# Import cycles allowed: none (the last one, blob.schema <-> blob.state_schema,
# went with the typed blob metadata). Kept as a parameter for the planted-tree tests.
ALLOWED_CYCLES: set[frozenset[str]] = set()


def module_names(src_root: pathlib.Path, package: str = PACKAGE) -> set[str]:
    return {module_name(p, src_root) for p in (src_root / package).rglob("*.py")}


def _resolve(imported: str, modules: set[str]) -> str | None:
    """The module an import names: the longest prefix that is one of ours
    (`pkg.blob.read_blob` -> `pkg.blob`); None for other packages."""
    parts = imported.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def import_cycles(edges: list[Edge], modules: set[str]) -> list[frozenset[str]]:
    """Every set of modules that import each other, directly or through others
    (the strongly connected components of more than one module), each with
    its members; an import of a module's own package (`from . import x` in
    __init__) is no cycle."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for edge in edges:
        target = _resolve(edge.imported, modules)
        if target is not None and target != edge.importer:
            graph[edge.importer].add(target)
    # Tarjan's algorithm, iterative (no recursion limit on deep chains).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(frozenset(members))
    return sorted(found, key=sorted)


def cycle_violations(edges: list[Edge], modules: set[str],
                     allowed: set[frozenset[str]] = frozenset()) -> list[str]:
    """The import cycles not in `allowed`, one readable line each."""
    return [f"import cycle: {' <-> '.join(sorted(c))}"
            for c in import_cycles(edges, modules) if c not in allowed]
