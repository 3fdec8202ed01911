"""What code comments and docstrings under src/ may not say: a module that
does not exist (a `name.py` path, or a dotted name of this package), an issue
number, or the name of a machine the tests ran on. Comments say why, in the
present; history stays in git.

Used by test_source_comments.py over the real tree and over planted trees, so
the checker itself can fail.
"""
from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

PACKAGE = "executorch_tensorrt"

# `name.py` (or a path ending in one) not preceded by a path character or a
# glob's `*` (tests/x/test_*_gpu.py names a family of files, not one).
FILE_REF = re.compile(r"(?<![\w./*-])([\w./-]*\w\.py)\b")
ISSUE_REF = re.compile(r"(#\d+\b|\bissues? #?\d+\b)", re.IGNORECASE)
MACHINE_REF = re.compile(r"\b(H100|H200|A100|A10G?|L4|L40S?|T4|V100|B200|GH200)\b")
# Names that stand for something other than a file of this tree.
NOT_OURS = {
    "backends/nvidia/tensorrt/backend.py",  # upstream ExecuTorch's TensorRT backend
    "file.py",  # the placeholder in `file.py:callable`
}
# File suffixes a dotted name may end in (`llm.md` is a page, not a module).
FILE_SUFFIXES = {"md", "py", "cpp", "h", "json", "toml", "txt", "so", "pte", "ptd", "expected"}
SKIP_DIRS = {".git", ".venv", "build", "dist", "__pycache__", "node_modules"}


def comments_and_docstrings(source: str):
    """(line, text) of every comment and every module/class/function docstring."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for i, line in enumerate(first.value.value.splitlines()):
                    yield first.lineno + i, line


def _tree_files(repo: Path) -> set[str]:
    found = set()
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        rel = Path(root).relative_to(repo).as_posix()
        found.update(f if rel == "." else f"{rel}/{f}" for f in files)
    return found


class Checker:
    def __init__(self, repo: Path, package: str = PACKAGE):
        self.repo = repo
        self.src = repo / "src"
        self.package_dir = self.src / package
        self.package = package
        self.files = _tree_files(repo)
        subpackages = sorted(p.stem for p in self.package_dir.iterdir()
                             if p.name != "__init__.py" and (p.is_dir() or p.suffix == ".py")
                             and p.name != "__pycache__")
        self.dotted = re.compile(r"(?<![\w.])((?:%s\.)?(?:%s)(?:\.\w+)+)"
                                 % (re.escape(package), "|".join(map(re.escape, subpackages))))

    def file_exists(self, ref: str, here: Path) -> bool:
        ref = ref.lstrip("./")
        if ref in NOT_OURS:
            return True
        if any((base / ref).exists() for base in (here.parent, self.package_dir, self.src,
                                                   self.repo)):
            return True
        return any(f == ref or f.endswith("/" + ref) for f in self.files)

    def dotted_exists(self, name: str) -> bool:
        parts = name.split(".")
        if parts[0] == self.package:
            parts = parts[1:]
        base = self.package_dir
        for part in parts:
            if (base / part).is_dir():
                base = base / part
            elif (base / f"{part}.py").exists():
                return True  # what follows is an attribute of the module
            else:
                # A class or a name the package's __init__ hands on; else missing.
                init = base / "__init__.py"
                return part[:1].isupper() or (init.exists() and re.search(
                    rf"\b{re.escape(part)}\b", init.read_text()) is not None)
        return True

    def problems(self, path: Path) -> list[str]:
        where = path.relative_to(self.repo).as_posix()
        found = []
        for line, text in comments_and_docstrings(path.read_text()):
            for m in FILE_REF.finditer(text):
                if not self.file_exists(m.group(1), path):
                    found.append(f"{where}:{line}: names a missing module {m.group(1)}")
            for m in self.dotted.finditer(text):
                name = m.group(1)
                if name.rsplit(".", 1)[-1] in FILE_SUFFIXES or text[m.end():m.end() + 1] in "/(":
                    continue
                if not self.dotted_exists(name):
                    found.append(f"{where}:{line}: names a missing module {name}")
            for m in ISSUE_REF.finditer(text):
                found.append(f"{where}:{line}: cites an issue ({m.group(1)})")
            for m in MACHINE_REF.finditer(text):
                found.append(f"{where}:{line}: names a test machine ({m.group(1)})")
        return found

    def all_problems(self) -> list[str]:
        return [p for path in sorted(self.package_dir.rglob("*.py")) for p in self.problems(path)]
