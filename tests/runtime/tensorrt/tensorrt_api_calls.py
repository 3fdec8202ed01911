"""Every attribute the package uses on TensorRT's objects, read from the source
with `ast`, and the checks of those uses against a TensorRT Python module (or a
stand-in class).

No machine here executes an engine, so a misspelled or renamed TensorRT call in
the executor would reach its first user. This follows TensorRT objects from
where they are made: calls on the TensorRT module (`m.Runtime(...)`), methods of
typed objects (their return types read from pybind's docstrings), functions of
the scanned files returning them. Where no creation is in sight (parameters,
attributes of our own objects) a receiver is typed by its name (`RECEIVERS`), and
the collector checks that table: a TensorRT object assigned to, or passed as, a
name the table does not type with its class is a finding, so no TensorRT object
travels untyped. Used by test_tensorrt_api.py over the real tree and a planted one.
"""
from __future__ import annotations

import ast
import inspect
import pathlib
import re
from dataclasses import dataclass, field

MODULE = "<module>"  # the TensorRT module itself (trt.module)
FLAVOR = "<flavor>"  # tensorrt/flavor.py's TensorRT: module, flavor, version

# The files that call TensorRT, relative to the package root.
SCANNED = ("runtime/tensorrt", "tensorrt", "runtime/cuda/graphs.py")

# Receiver name -> what it holds, wherever the test cannot see the object made.
# A name is a parameter or local; a dotted path an attribute of our own object.
# CollectingLogger and LayerTimes are our subclasses of ILogger and IProfiler.
RECEIVERS: dict[str, str] = {
    "trt": FLAVOR, "m": MODULE, "engine": "ICudaEngine", "context": "IExecutionContext",
    "logger": "CollectingLogger", "parser": "OnnxParser",
    "builder": "Builder", "network": "INetworkDefinition", "config": "IRuntimeConfig",
    "refitter": "Refitter", "parser_refitter": "OnnxParserRefitter", "err": "ParserError",
    "profile": "IOptimizationProfile", "serialized": "IHostMemory",
    "profiler": "LayerTimes",
    "self.trt": FLAVOR, "self.engine": "ICudaEngine", "self.runtime": "Runtime",
    "self.logger": "CollectingLogger", "self.context": "IExecutionContext",
    "self.bound.context": "IExecutionContext",
    "self.bound.layer_timings": "LayerTimes", "self.layer_timings": "LayerTimes",
    "self.cache": "IRuntimeCache",
}
# Attributes of other TensorRT versions the code falls back to, not in TensorRT-RTX.
OTHER_VERSIONS: dict[tuple[str, str], str] = {
    ("ICudaEngine", "device_memory_size"): "standard TensorRT 10.0 (before device_memory_size_v2)",
}
# Per file, where a name means something else there (None: not a TensorRT object).
FILE_RECEIVERS: dict[str, dict[str, str | None]] = {
    "tensorrt/engine_builder.py": {"config": "IBuilderConfig"},
}


PLAIN = {"int", "str", "bytes", "float", "bool", "list", "dict", "tuple"}


@dataclass(frozen=True)
class Use:
    """One use of a TensorRT attribute: `cls` is a class name or MODULE."""
    cls: str
    name: str
    where: str  # file:line
    call: tuple[int, tuple[str, ...]] | None = None  # (positional count, keywords); None: no call
    store: bool = False  # assigned (a property)
    guarded: bool = False  # behind hasattr/getattr(..., default)/except AttributeError
    rtx_only: bool = False  # behind `trt.is_rtx`


@dataclass
class Report:
    uses: list[Use] = field(default_factory=list)
    untyped: list[str] = field(default_factory=list)  # TensorRT objects in untyped names
    used_receivers: set[str] = field(default_factory=set)


def _files(root: pathlib.Path) -> list[pathlib.Path]:
    out: list[pathlib.Path] = []
    for entry in SCANNED:
        path = root / entry
        out += sorted(path.glob("*.py")) if path.is_dir() else [path]
    return out


def _return_class(module, member) -> str | None:
    """The TensorRT class a pybind method returns, from its docstring (the
    C++ name where pybind gives one: nvonnxparser::IParserError is ParserError)."""
    found = re.search(r"\)\s*->\s*([\w.:]+)", getattr(member, "__doc__", None) or "")
    if not found:
        return None
    name = re.split(r"\.|::", found.group(1))[-1]
    for candidate in (name, name[1:] if name.startswith("I") else name):
        if inspect.isclass(getattr(module, candidate, None)):
            return candidate
    return None


class _Scanner:
    def __init__(self, module, root: pathlib.Path):
        self.trt, self.root = module, root
        self.report = Report()
        self.returns: dict[str, object] = {}  # function name -> returned type
        self.params: dict[str, list[str]] = {}  # function/class name -> parameter names
        self.subclasses: dict[str, str] = {}  # our class -> the TensorRT class it extends
        self.own: dict[str, set[str]] = {}  # what those classes add (methods, self.X)

    # --- types -----------------------------------------------------------------------------
    def table(self, name: str) -> str | None:
        per_file = FILE_RECEIVERS.get(self.rel, {})
        return per_file[name] if name in per_file else RECEIVERS.get(name)

    def type_of(self, node, env: dict) -> object:
        if isinstance(node, ast.Name):
            if node.id in env:
                if env[node.id] is not None and env[node.id] == self.table(node.id):
                    self.report.used_receivers.add(node.id)
                return env[node.id]
            if node.id in self.subclasses or hasattr(self.trt, node.id):
                return None  # our classes and functions
            return self.table(node.id)
        if isinstance(node, ast.Attribute):
            base = self.type_of(node.value, env)
            if base == FLAVOR:
                return MODULE if node.attr == "module" else None
            if base == MODULE:
                return f"class:{node.attr}"
            if isinstance(base, str) and base.startswith("class:"):
                return None  # an enum member or a class attribute: checked, not followed
            if isinstance(base, str):
                return _return_class(self.trt, _member(self.trt, base, node.attr)) \
                    if _is_trt_class(self.trt, base) else None
            path = ast.unparse(node)  # an attribute of our own object: typed by its path
            if self.table(path) is not None:
                self.report.used_receivers.add(path)
            return self.table(path)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("getattr",) and len(node.args) >= 2:
                base = self.type_of(node.args[0], env)
                if base == MODULE and isinstance(node.args[1], ast.Constant):
                    return f"class:{node.args[1].value}"
                return None
            if isinstance(func, ast.Name):
                if func.id == "load_tensorrt":
                    return FLAVOR
                if func.id in self.subclasses:
                    return func.id
                return self.returns.get(func.id)
            kind = self.type_of(func, env)
            if isinstance(kind, str) and kind.startswith("class:"):
                return kind[6:]  # a TensorRT constructor
            if isinstance(func, ast.Attribute):
                base = self.type_of(func.value, env)
                if isinstance(base, str) and _is_trt_class(self.trt, base):
                    return _return_class(self.trt, _member(self.trt, base, func.attr))
            return None
        if isinstance(node, ast.Tuple):
            return tuple(self.type_of(e, env) for e in node.elts)
        return None

    # --- the walk --------------------------------------------------------------------------
    def scan(self, collect: bool) -> None:
        self.collect = collect
        for path in _files(self.root):
            self.rel = path.relative_to(self.root).as_posix()
            tree = ast.parse(path.read_text(), str(path))
            self._body(tree.body, {}, cls=None)

    def _body(self, body, env: dict, cls: str | None) -> None:
        for stmt in body:
            self._stmt(stmt, env, cls)

    def _stmt(self, stmt, env: dict, cls: str | None) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [a.arg for a in stmt.args.posonlyargs + stmt.args.args + stmt.args.kwonlyargs]
            # A plain-type annotation (`context: int`) says the name is not TensorRT's here.
            notes = {a.arg: ast.unparse(a.annotation) for a in stmt.args.args + stmt.args.kwonlyargs
                     if a.annotation is not None}
            inner = {a: None if a == "self" or notes.get(a, "").split(" ")[0] in PLAIN
                     else self.table(a) for a in names}
            key = stmt.name if cls is None or stmt.name != "__init__" else cls
            self.params[key] = [a for a in names if a != "self"]
            self.cls = cls
            self._body(stmt.body, inner, cls)
            for ret in ast.walk(stmt):
                if isinstance(ret, ast.Return) and ret.value is not None:
                    t = self.type_of(ret.value, inner)
                    if t is not None:
                        self.returns[stmt.name] = t
            return
        if isinstance(stmt, ast.ClassDef):
            for base in stmt.bases:
                t = self.type_of(base, env)
                if isinstance(t, str) and t.startswith("class:"):
                    self.subclasses[stmt.name] = t[6:]
                    self.own[stmt.name] = {n.name for n in stmt.body if isinstance(
                        n, ast.FunctionDef)} | {n.attr for n in ast.walk(stmt) if isinstance(
                            n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                            and ast.unparse(n.value) == "self"}
            self._visit_exprs(stmt.bases, env)
            self._body(stmt.body, {}, stmt.name)
            return
        if isinstance(stmt, ast.Assign):
            self._visit_exprs([stmt.value], env)
            t = self.type_of(stmt.value, env)
            for target in stmt.targets:
                self._bind(target, t, env, stmt.lineno)
            return
        if isinstance(stmt, ast.Try):
            catches = any("AttributeError" in ast.dump(h.type) for h in stmt.handlers if h.type)
            self._guard_depth += catches
            self._body(stmt.body, env, cls)
            self._guard_depth -= catches
            for h in stmt.handlers:
                self._body(h.body, env, cls)
            self._body(stmt.orelse + stmt.finalbody, env, cls)
            return
        if isinstance(stmt, ast.If):
            self._visit_exprs([stmt.test], env)
            rtx = "is_rtx" in ast.unparse(stmt.test) and "not " not in ast.unparse(stmt.test)
            self._rtx_depth += rtx
            saved = self._guarded
            self._guarded = saved | self._hasattrs(stmt.test, env)  # `if hasattr(x, "n"):`
            self._body(stmt.body, env, cls)
            self._guarded = saved
            self._rtx_depth -= rtx
            self._body(stmt.orelse, env, cls)
            return
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                self._stmt(child, env, cls)
            elif isinstance(child, ast.expr):
                self._visit_exprs([child], env)
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._bind(stmt.target, self.type_of(stmt.value, env), env, stmt.lineno)

    def _hasattrs(self, test, env: dict) -> frozenset:
        found = set()
        for node in ast.walk(test):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "hasattr" and len(node.args) == 2 \
                    and isinstance(node.args[1], ast.Constant):
                base = self.type_of(node.args[0], env)
                if isinstance(base, str):
                    found.add((base, node.args[1].value))
        return frozenset(found)

    _guarded: frozenset = frozenset()
    _guard_depth = 0
    _rtx_depth = 0
    cls: str | None = None

    def _bind(self, target, t, env: dict, line: int) -> None:
        if isinstance(target, ast.Tuple):
            parts = t if isinstance(t, tuple) else (None,) * len(target.elts)
            for e, p in zip(target.elts, parts):
                self._bind(e, p, env, line)
            return
        if isinstance(target, ast.Name):
            self._expect(target.id, t, line)
            env[target.id] = t
            return
        if isinstance(target, ast.Attribute):
            base = self.type_of(target.value, env)
            if isinstance(base, str) and base not in (FLAVOR,) and not base.startswith("class:"):
                self._use(base, target.attr, target.lineno, store=True)
            else:
                self._visit_exprs([target.value], env)
                self._expect(ast.unparse(target), t, line)
            return
        self._visit_exprs([target], env)

    def _expect(self, name: str, t, line: int) -> None:
        """A TensorRT object lands in `name`: the table must type it so."""
        if not isinstance(t, str) or t.startswith("class:") or name.startswith("_"):
            return
        if self.table(name) != t:
            self.report.untyped.append(f"{self.rel}:{line}: {name!r} holds a TensorRT {t}, "
                                       f"but RECEIVERS types it as {self.table(name)!r}")
        else:
            self.report.used_receivers.add(name)

    def _use(self, cls: str, name: str, line: int, **kw) -> None:
        if cls in self.subclasses:  # our subclass of a TensorRT class
            if name in self.own[cls]:
                return
            cls = self.subclasses[cls]
        if (cls, name) in self._guarded:
            kw["guarded"] = True
        if self.collect and not (name.startswith("__") and name != "__init__"):
            self.report.uses.append(Use(cls, name, f"{self.rel}:{line}",
                                        guarded=kw.pop("guarded", False) or self._guard_depth > 0,
                                        rtx_only=self._rtx_depth > 0, **kw))

    def _visit_exprs(self, nodes, env: dict) -> None:
        for node in nodes:
            self._expr(node, env)

    def _expr(self, node, env: dict, called: ast.Call | None = None) -> None:
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            rtx = False
            for value in node.values:
                self._rtx_depth += rtx
                self._expr(value, env)
                self._rtx_depth -= rtx
                rtx = rtx or "is_rtx" in ast.unparse(value)
            return
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                base = self.type_of(node.args[0], env)
                if isinstance(base, str) and base not in (FLAVOR,):
                    self._use(base[6:] if base.startswith("class:") else base,
                              node.args[1].value, node.lineno,
                              guarded=func.id == "hasattr" or len(node.args) > 2)
            self._expr(func, env, called=node)
            self._check_args(node, env)
            for a in node.args + [k.value for k in node.keywords]:
                self._expr(a, env)
            return
        if isinstance(node, ast.Attribute):
            base = self.type_of(node.value, env)
            if isinstance(base, str) and base != FLAVOR:
                cls = MODULE if base == MODULE else base[6:] if base.startswith("class:") else base
                call = None
                if called is not None:
                    if any(isinstance(a, ast.Starred) for a in called.args) or \
                            any(k.arg is None for k in called.keywords):
                        call = (-1, ())
                    else:
                        call = (len(called.args), tuple(k.arg for k in called.keywords))
                if cls == MODULE and called is not None:  # a constructor: its __init__
                    self._use(MODULE, node.attr, node.lineno)
                    self._use(node.attr, "__init__", node.lineno, call=call)
                else:
                    self._use(cls, node.attr, node.lineno, call=call)
            self._expr(node.value, env)
            return
        if isinstance(node, (ast.Lambda,)):
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = dict(env)
            for gen in node.generators:
                self._expr(gen.iter, inner)
                self._bind(gen.target, None, inner, node.lineno)
                for cond in gen.ifs:
                    self._expr(cond, inner)
            for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
                self._expr(part, inner)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._expr(child, env)

    def _check_args(self, call: ast.Call, env: dict) -> None:
        """TensorRT objects passed to our functions land in parameters typed so."""
        func = call.func
        name = func.id if isinstance(func, ast.Name) else None
        if name is None or name not in self.params:
            return
        params = self.params[name]
        pairs = list(zip(params, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg]
        for param, value in pairs:
            self._expect(param, self.type_of(value, env), call.lineno)


def _is_trt_class(module, name: str) -> bool:
    return name not in (MODULE, FLAVOR) and not name.startswith("class:") \
        and inspect.isclass(getattr(module, name, None))


def _member(module, cls: str, name: str):
    return getattr(getattr(module, cls, None), name, None)


def collect(module, package_root: pathlib.Path) -> Report:
    """The uses of TensorRT in the package at `package_root` (src/executorch_tensorrt
    or a copy), typed with `module`'s classes (tensorrt_rtx or tensorrt)."""
    scanner = _Scanner(module, pathlib.Path(package_root))
    for _ in range(3):  # our functions' return types reach their callers
        scanner.scan(collect=False)
    scanner.report = Report()
    scanner.scan(collect=True)
    return scanner.report


