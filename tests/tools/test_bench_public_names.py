"""The benchmarks (tools/bench/*.py) use the package's public names only: no
underscore-prefixed module or name imported from it, and no underscore
attribute read or set on what they import from it (read with `ast`)."""
from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "tools" / "bench"
PACKAGE = "executorch_tensorrt"


def private_uses(source: str, where: str) -> list[str]:
    tree = ast.parse(source, where)
    ours: set[str] = set()  # local names bound to our modules, classes, functions
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
            parts = node.module.split(".") + [a.name for a in node.names]
            found += [f"{where}:{node.lineno} imports {p} from {node.module}" for p in parts
                      if p.startswith("_") and not p.startswith("__")]
            ours.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == PACKAGE:
                    found += [f"{where}:{node.lineno} imports {a.name}"
                              for p in a.name.split(".") if p.startswith("_")]
                    ours.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in ours):
            found.append(f"{where}:{node.lineno} uses {node.value.id}.{node.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "__new__" and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id in ours):
            found.append(f"{where}:{node.lineno} builds {node.args[0].id} around its constructor")
    return sorted(found)


def test_benchmarks_use_public_names_only():
    scripts = sorted(BENCH.glob("*.py"))
    assert len(scripts) >= 5
    found = [f for s in scripts for f in private_uses(s.read_text(), s.name)]
    assert found == []


def test_checker_finds_private_uses():
    planted = (
        "from executorch_tensorrt.runtime.onnxruntime.executor import _ORT_ELEMENT_TYPES\n"
        "from executorch_tensorrt.runtime._hidden import thing\n"
        "def f():\n"
        "    from executorch_tensorrt.runtime.tensorrt.executor import TensorRTExecutor\n"
        "    ex = object.__new__(TensorRTExecutor)\n"
        "    from executorch_tensorrt.runtime.onnxruntime import executor\n"
        "    return executor._ORT_ELEMENT_TYPES\n")
    assert private_uses(planted, "x.py") == [
        "x.py:1 imports _ORT_ELEMENT_TYPES from executorch_tensorrt.runtime.onnxruntime.executor",
        "x.py:2 imports _hidden from executorch_tensorrt.runtime._hidden",
        "x.py:5 builds TensorRTExecutor around its constructor",
        "x.py:7 uses executor._ORT_ELEMENT_TYPES",
    ]
