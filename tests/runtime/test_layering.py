"""runtime/ and tensorrt/ never import aot/ or executorch.exir, and the
runtime never imports torch (a C++ process embedding it starts fast:
docs/cpp.md; tests/native/test_cpp_runner_no_torch.py checks the embedded
interpreter itself).

One fresh child interpreter:
1. imports the package with registration skipped, then every module the
   executors and the rebuild path import, and checks that neither
   `executorch.exir` nor `executorch_tensorrt.aot` nor torch came with them;
2. loads the adapter, installs the executors, loads and runs a program through
   `executorch.runtime` and rebuilds an engine from a blob's embedded ONNX
   (the load-time rebuild path), with an import hook that records which module
   asks for `executorch.exir*` or `executorch_tensorrt.aot*`.
ExecuTorch's own Python runtime (`executorch.extension.pybindings.portable_lib`)
imports `executorch.exir` itself, so in step 2 only imports asked for by this
package's modules count.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import tensorrt_blobs
from layering_rules import (
    ALLOWED_CYCLES,
    cycle_violations,
    import_cycles,
    import_edges,
    module_names,
    violations,
)

CHILD = textwrap.dedent(r'''
    import importlib, json, os, sys

    FORBIDDEN = ("executorch.exir", "executorch_tensorrt.aot")
    asked = []

    class Recorder:
        """Records the module that imports a forbidden one (never loads anything)."""
        def find_spec(self, name, path=None, target=None):
            if name.startswith(FORBIDDEN):
                frame = sys._getframe(1)
                while frame and frame.f_globals.get("__name__", "").startswith(
                        ("importlib", "_frozen_importlib")):
                    frame = frame.f_back
                asked.append((name, frame.f_globals.get("__name__") if frame else None))
            return None

    sys.meta_path.insert(0, Recorder())

    def forbidden_loaded():
        return sorted(m for m in sys.modules if m.startswith(FORBIDDEN))

    # 1. Everything the executors and the rebuild path import, adapter not loaded.
    os.environ["EXECUTORCH_TENSORRT_SKIP_REGISTRATION"] = "1"
    import executorch_tensorrt
    for module in json.loads(sys.argv[1]):
        importlib.import_module(module)
    step1 = forbidden_loaded()
    torch_step1 = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))

    # 2. Load the adapter, install the executors, run a program, rebuild an engine.
    del os.environ["EXECUTORCH_TENSORRT_SKIP_REGISTRATION"]
    from executorch_tensorrt.runtime.adapter import loader
    from executorch_tensorrt.runtime import callbacks
    loader.load_adapter()
    callbacks.install()
    import torch
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(sys.argv[2]).load_method("forward")
    out = method.execute([torch.ones(2, 3)])[0]
    from executorch_tensorrt.blob import read_blob, write_blob
    from executorch_tensorrt.runtime.tensorrt.portability import rebuilt_engine
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt
    old = read_blob(open(sys.argv[3], "rb").read())
    stale = read_blob(write_blob(old.engine, dict(old.metadata, trt_version="0.1.2"),
                                 onnx=old.onnx))
    engine = rebuilt_engine(stale, load_tensorrt(), "SM89")
    ours = [(n, who) for n, who in asked if (who or "").startswith("executorch_tensorrt")]
    print(json.dumps({"step1": step1, "torch": torch_step1, "ours": ours, "out": out.tolist(),
                      "aot": [m for m in sys.modules if m.startswith("executorch_tensorrt.aot")],
                      "engine": len(engine)}))
''')

RUNTIME_MODULES = [
    "executorch_tensorrt.errors",
    "executorch_tensorrt.blob",
    "executorch_tensorrt.runtime.adapter.abi",
    "executorch_tensorrt.runtime.callbacks",
    "executorch_tensorrt.runtime.executor",
    "executorch_tensorrt.runtime.arguments",
    "executorch_tensorrt.runtime.tensorrt.executor",
    "executorch_tensorrt.runtime.onnxruntime.executor",
    "executorch_tensorrt.runtime.onnxruntime.upcast",
    "executorch_tensorrt.runtime.onnx_safety",
    "executorch_tensorrt.runtime.tensorrt.portability",
    "executorch_tensorrt.runtime.embedded",
    "executorch_tensorrt.runtime.state",
    "executorch_tensorrt.runtime.onnxruntime.state",
    "executorch_tensorrt.runtime.tensorrt.device_state",
    "executorch_tensorrt.runtime.cuda.copies",
    "executorch_tensorrt.runtime.named_data",
    "executorch_tensorrt.runtime.native_plan",
    "executorch_tensorrt.runtime.onnxruntime.run_plan",
    "executorch_tensorrt.runtime.profiling",
    "executorch_tensorrt.runtime.cuda.device",
    "executorch_tensorrt.runtime.cuda.graphs",
    "executorch_tensorrt.runtime.cuda.objects",
    "executorch_tensorrt.runtime.tensorrt.context",
    "executorch_tensorrt.runtime.tensorrt.rtx_runtime_cache",
    "executorch_tensorrt.runtime.tensorrt.engine_cache",
    "executorch_tensorrt.tensorrt.flavor",
    "executorch_tensorrt.tensorrt.options",
    "executorch_tensorrt.tensorrt.engine_builder",
    "executorch_tensorrt.tensorrt.onnx_parser",
]


def test_runtime_imports_neither_aot_nor_exir(exported, tmp_path):
    _, _, pte = exported("add", inline_weights=True)  # a blob with a plan
    blob_path = tmp_path / "delegate.blob"
    blob_path.write_bytes(tensorrt_blobs(pte)[0])
    env = dict(os.environ, EXECUTORCH_TENSORRT_FALLBACK="onnxruntime",
               EXECUTORCH_TENSORRT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("EXECUTORCH_TENSORRT_SKIP_REGISTRATION", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(RUNTIME_MODULES), str(pte),
                           str(blob_path)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["step1"] == [], f"importing the runtime loaded {result['step1']}"
    assert result["torch"] == [], f"importing the runtime loaded torch: {result['torch'][:5]}"
    assert result["ours"] == [], f"this package's modules imported {result['ours']}"
    assert result["aot"] == []
    assert result["out"] == [[2.0] * 3] * 2
    assert result["engine"] > 0


# Static rules over the source tree (layering_rules.py); function-local imports count.
SRC_ROOT = Path(__file__).resolve().parents[2] / "src"


def test_source_tree_keeps_the_import_rules():
    edges = import_edges(SRC_ROOT)
    assert len(edges) > 100  # the walk found the package
    assert violations(edges) == []


def test_source_tree_has_no_import_cycle():
    """Function-local and TYPE_CHECKING imports count; nothing is allow-listed."""
    assert not ALLOWED_CYCLES
    assert cycle_violations(import_edges(SRC_ROOT), module_names(SRC_ROOT), ALLOWED_CYCLES) == []


def _plant(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_reports_planted_violations(tmp_path):
    _plant(tmp_path, {
        "fakepkg/__init__.py": "",
        "fakepkg/errors.py": "",
        "fakepkg/blob/__init__.py": "from ..errors import *\n",
        "fakepkg/runtime/__init__.py": "",
        "fakepkg/runtime/run.py": ("from fakepkg.blob import x\n"
                                   "def later():\n    from ..aot import backend\n"
                                   "    import torch\n"),
        "fakepkg/aot/__init__.py": "",
        "fakepkg/aot/backend.py": "from ..cli import main\n",
        "fakepkg/cli/__init__.py": "",
        "fakepkg/cli/main.py": "from fakepkg.aot import backend\n",
        "fakepkg/tensorrt/__init__.py": "from fakepkg.program import info\n",
        "fakepkg/program/__init__.py": "",
        "fakepkg/llm/__init__.py": "",
        "fakepkg/llm/exporter.py": "from ..examples.llm import export_hf\n",
        "fakepkg/examples/__init__.py": "",
        "fakepkg/examples/llm.py": "from ..llm.exporter import export\n",
        "fakepkg/runtime/choose.py": "from .testing import stand_in_factory\n",
        "fakepkg/runtime/testing.py": "def later():\n    from .tensorrt import executor\n",
        "fakepkg/runtime/tensorrt/__init__.py": "",
        "fakepkg/runtime/tensorrt/executor.py": ("from ..onnxruntime.run_plan import OrtRunPlan\n"
                                                 "from ..testing import executor_over\n"),
        "fakepkg/runtime/onnxruntime/__init__.py": "",
        "fakepkg/runtime/onnxruntime/run_plan.py": "from ..native_plan import retire\n",
        "fakepkg/quantization/__init__.py": "",
        "fakepkg/quantization/importers.py": "from .formats.fp8 import FP8\n",
        "fakepkg/quantization/formats/__init__.py": "",
        "fakepkg/quantization/formats/fp8.py": "from . import int8\n",
    })
    found = violations(import_edges(tmp_path, "fakepkg"), "fakepkg")
    assert found == [
        "formats are reached through the quantization registry: "
        "fakepkg.quantization.importers:1 imports fakepkg.quantization.formats.fp8",
        "formats are reached through the quantization registry: "
        "fakepkg.quantization.importers:1 imports fakepkg.quantization.formats.fp8.FP8",
        "nothing imports cli/: fakepkg.aot.backend:1 imports fakepkg.cli",
        "nothing imports cli/: fakepkg.aot.backend:1 imports fakepkg.cli.main",
        "only runtime/choose.py asks the test-only hooks: "
        "fakepkg.runtime.tensorrt.executor:2 imports fakepkg.runtime.testing",
        "only runtime/choose.py asks the test-only hooks: "
        "fakepkg.runtime.tensorrt.executor:2 imports fakepkg.runtime.testing.executor_over",
        "runtime/ never imports aot, quantization, cli, exir or torch: "
        "fakepkg.runtime.run:3 imports fakepkg.aot",
        "runtime/ never imports aot, quantization, cli, exir or torch: "
        "fakepkg.runtime.run:3 imports fakepkg.aot.backend",
        "runtime/ never imports aot, quantization, cli, exir or torch: "
        "fakepkg.runtime.run:4 imports torch",
        "the TensorRT and onnxruntime executors never import each other: "
        "fakepkg.runtime.tensorrt.executor:1 imports fakepkg.runtime.onnxruntime.run_plan",
        "the TensorRT and onnxruntime executors never import each other: "
        "fakepkg.runtime.tensorrt.executor:1 imports "
        "fakepkg.runtime.onnxruntime.run_plan.OrtRunPlan",
        "upward import (aot below cli): fakepkg.aot.backend:1 imports fakepkg.cli",
        "upward import (aot below cli): fakepkg.aot.backend:1 imports fakepkg.cli.main",
        "upward import (llm below examples): fakepkg.llm.exporter:1 imports fakepkg.examples.llm",
        "upward import (llm below examples): "
        "fakepkg.llm.exporter:1 imports fakepkg.examples.llm.export_hf",
        "upward import (runtime below aot): fakepkg.runtime.run:3 imports fakepkg.aot",
        "upward import (runtime below aot): fakepkg.runtime.run:3 imports fakepkg.aot.backend",
        "upward import (tensorrt below program): fakepkg.tensorrt:1 imports fakepkg.program",
        "upward import (tensorrt below program): "
        "fakepkg.tensorrt:1 imports fakepkg.program.info",
    ]


def test_checker_reports_planted_cycles(tmp_path):
    """A cycle through a function-local import, one through a TYPE_CHECKING
    import over three modules, and a package's own `from . import` (no cycle)."""
    _plant(tmp_path, {
        "fakepkg/__init__.py": "from . import a\n",
        "fakepkg/a.py": "from .b import thing\n",
        "fakepkg/b.py": "def later():\n    from fakepkg import a\n",
        "fakepkg/aot/__init__.py": "",
        "fakepkg/aot/x.py": "from .y import Y\n",
        "fakepkg/aot/y.py": "from . import z\n",
        "fakepkg/aot/z.py": ("from typing import TYPE_CHECKING\n"
                             "if TYPE_CHECKING:\n    from .x import X\n"),
        "fakepkg/aot/alone.py": "from . import x\nimport os\n",
    })
    edges = import_edges(tmp_path, "fakepkg")
    modules = module_names(tmp_path, "fakepkg")
    assert import_cycles(edges, modules) == [
        frozenset({"fakepkg", "fakepkg.a", "fakepkg.b"}),
        frozenset({"fakepkg.aot.x", "fakepkg.aot.y", "fakepkg.aot.z"}),
    ]
    allowed = {frozenset({"fakepkg.aot.x", "fakepkg.aot.y", "fakepkg.aot.z"})}
    assert cycle_violations(edges, modules, allowed) == [
        "import cycle: fakepkg <-> fakepkg.a <-> fakepkg.b"]


def test_a_cycle_planted_in_a_copy_of_the_tree_is_found(tmp_path):
    """The old export <-> translatable cycle put back (a function-local import)
    in a copy of the real tree: the check that passes on the tree fails."""
    import shutil

    shutil.copytree(SRC_ROOT / "executorch_tensorrt", tmp_path / "executorch_tensorrt")
    translatable = tmp_path / "executorch_tensorrt/aot/onnx/translatable.py"
    translatable.write_text(translatable.read_text()
                            + "\n\ndef _planted():\n    from .export import export_onnx\n")
    found = cycle_violations(import_edges(tmp_path), module_names(tmp_path), ALLOWED_CYCLES)
    assert found == ["import cycle: executorch_tensorrt.aot.onnx.export <-> "
                     "executorch_tensorrt.aot.onnx.translatable"]
