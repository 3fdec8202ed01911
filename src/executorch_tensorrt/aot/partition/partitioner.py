"""TensorRTPartitioner: TensorRT's own ONNX parser decides what it takes.

1. Nodes the ONNX exporter cannot translate, nodes in `exclude_ops` and
   nodes with dtypes TensorRT has no type for are never candidates.
2. Candidates are grouped into partitions (ExecuTorch/FX helpers).
3. Each partition is cut out as its own program, exported to ONNX and given
   to TensorRT: nodes its parser places in no supported subgraph, then nodes
   a full parse rejects, are dropped; a partition whose engine does not build
   is dropped whole. Repeat until every partition builds.
The ONNX graphs carry no weights (aot/onnx/export.py); the parser reads them by
address. ExecuTorch hands partitioners programs with fake weights: the check
build uses zero pages instead (no memory) and keeps no plan when no engine is
shipped (the default without a GPU), so preprocess builds nothing at all;
partitions over CHECK_BUILD_MAX_WEIGHTS are then checked by a full parse only.
When an engine is shipped and export() gave the real weights, the check
builds with them and preprocess reuses that engine from the cache: one build
per partition. Parser answers are cached per ONNX model within a process.
"""
from __future__ import annotations

import operator
from typing import Callable, Iterable

import torch
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ...errors import EngineBuildError
from ...quantization.importers.qdq_graph import unpaired_qdq
from ..backend import engine_kind, weights_id
from ..compile_spec import TensorRTCompileSpec, with_profiles
from ...tensorrt.engine_builder import Progress, build_engine, stderr_progress
from ...tensorrt.onnx_parser import ParseFailure, unsupported_node_reasons
from ..onnx.edge_tags import quiet
from ..onnx.export import export_failure_reason, export_onnx
from ..onnx.export_cache import OnnxExportCache
from .checks import options_error, output_mismatch, scalar_input_readers
from .program import extract_partition
from ..program_copy import needs_stand_ins
from .report import PartitionReport
from .shape_values import attach, is_shape_value
from ..profiles.shapes import input_profile_sets, resolve_profiles, resolved_option
from ..state.owned import mark_caller_caches, tag_owned_state
from ...tensorrt.flavor import load_tensorrt
from ..onnx.translatable import aten_op, untranslatable_nodes
from ..weights.content import initializer_pointers

BACKEND_ID = "TensorRTBackend"
# dtypes TensorRT has no type for (ONNX would carry them; TensorRT would not).
UNSUPPORTED_DTYPES = {torch.float64, torch.complex64, torch.complex128, torch.complex32,
                      torch.int16, torch.uint16, torch.uint32, torch.uint64}
_MAX_ROUNDS = 50
# Ops TensorRT translates whole and the portable runtime has a kernel for (when
# TensorRT leaves one, it must still run): kept out of to_edge's decompositions.
KEEP_WHOLE = (torch.ops.aten.linear.default,)
# Checks (export, parse, build) one method may spend splitting partitions that fail.
DEFAULT_MAX_BUILDS = 64
# A check build costs 1.5-2x its weights in memory while it runs (TensorRT's
# copies and the plan; docs/big-models.md). Where no engine is shipped (no GPU
# at export: it is built at load), partitions with more weights are checked
# without a build, so the check never costs more than ~128 MB.
CHECK_BUILD_MAX_WEIGHTS = 64 << 20
def op_name(target) -> str:
    """'aten.convolution.default' for an edge or aten op."""
    op = aten_op(target)
    if isinstance(op, torch._ops.OpOverload):
        return f"{op.namespace}.{op._opname}.{op._overloadname}"
    return getattr(target, "__name__", str(target))


def normalize_op_names(names: Iterable[str]) -> frozenset[str]:
    out = set()
    for name in names:
        if not isinstance(name, str) or name.count(".") < 1:
            raise ValueError(
                f"exclude_ops entry {name!r} is not an op name like 'aten.convolution.default'")
        n = name.replace("::", ".")
        if n.startswith("torch.ops."):
            n = n[len("torch.ops."):]
        out.add(n if n.count(".") >= 2 else n + ".default")
    return frozenset(out)


def _before_edge(node: torch.fx.Node) -> bool:
    """Keep the ATen op whole; say nothing of the edge op. ExecuTorch asks the same
    question after lowering and fails on any kept op still in the graph that the
    check accepts; a node TensorRT then rejected runs on the portable kernel
    (KEEP_WHOLE lists only ops that have one), so it must not count."""
    return isinstance(node.target, torch._ops.OpOverload)


class _Supported(OperatorSupportBase):
    def __init__(self, names: set[str]):
        self.names = names

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            src = node.args[0]
            return isinstance(src, torch.fx.Node) and src.name in self.names
        return node.name in self.names


def _dtypes(node: torch.fx.Node) -> set[torch.dtype]:
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    out = set()
    for v in vals:
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor):
                out.add(t.dtype)
    return out


def _produces_tensors(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return bool(vals) and all(isinstance(v, torch.Tensor) for v in vals)


def _escaping_shape_values(groups: list[list[torch.fx.Node]]) -> dict[str, str]:
    """Shape values still crossing a boundary after private_shape_values and attach (none
    expected): a partition outputs tensors only, so such a node stays outside."""
    out = {}
    for nodes in groups:
        names = {n.name for n in nodes}
        for n in nodes:
            if is_shape_value(n) and any(u.name not in names for u in n.users):
                out[n.name] = ("a shape value used outside its TensorRT partition (partitions "
                               "output tensors only); stays with ExecuTorch")
    return out


def _parser_refusals(reasons: dict[int, str], edge_node_of: dict[int, str],
                     names: set[str]) -> dict[str, str]:
    """Edge node -> the parser's refusal, in its own words, of the ONNX nodes
    made from it (one edge node may become several ONNX nodes)."""
    words: dict[str, list[str]] = {}
    for index, reason in sorted(reasons.items()):
        node = edge_node_of.get(index)
        if node in names and reason not in words.setdefault(node, []):
            words[node].append(reason)
    return {n: "TensorRT's ONNX parser does not support it: " + "; ".join(w)
            for n, w in words.items()}


class TensorRTPartitioner(Partitioner):
    """Tags the nodes TensorRT can run. Options are TensorRTCompileSpec's."""

    def __init__(self, compile_spec: TensorRTCompileSpec | None = None, *,
                 exclude_ops: Iterable[str] = (), progress: Progress | None = stderr_progress,
                 max_builds: int = DEFAULT_MAX_BUILDS, keep_whole: Iterable = (),
                 state: str = "delegate", **options):
        if compile_spec is not None and options:
            raise TypeError("pass either compile_spec or keyword options, not both")
        self.compile_spec = compile_spec or TensorRTCompileSpec(**options)
        if state not in ("delegate", "caller"):
            raise ValueError(f"state must be 'delegate' (KV caches live in the TensorRT "
                             f"partition) or 'caller' (they stay with ExecuTorch), got {state!r}")
        self.state = state  # docs/llm.md
        self.exclude_ops = normalize_op_names(exclude_ops)
        self.max_builds = max_builds  # checks one method may spend splitting partitions
        self._split_builds_left = max_builds
        # Partitioners after this one that ask ops to stay whole (ops_to_not_decompose).
        self.keep_whole = list(keep_whole)
        self.progress = progress
        # Checked partitions' ONNX exports for preprocess, named in the delegation
        # spec (onnx/export_cache.py); it lives as long as this partitioner.
        self.export_cache = OnnxExportCache()
        self.delegation_spec = DelegationSpec(
            BACKEND_ID, [*self.compile_spec.to_compile_specs(), self.export_cache.compile_spec()])
        self.report = PartitionReport()
        self.reports: list[PartitionReport] = []  # one per partition() call (per method)
        # Per method, in partition() call order: name -> real weight, so that a
        # check build can be the shipped engine (export_program sets it).
        self.real_weights: list[dict] = []
        self._profiles = None  # resolve_profiles' answer for the program being partitioned

    # -- candidate selection -------------------------------------------------
    def _initial_rejections(self, ep) -> dict[str, str]:
        rejected: dict[str, str] = {}
        for node in ep.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            name = op_name(node.target)
            self.report.ops_of[node.name] = name
            if name in self.exclude_ops:
                rejected[node.name] = "excluded by exclude_ops"
            elif not (_produces_tensors(node) or is_shape_value(node)):
                rejected[node.name] = ("produces no tensor (a runtime check or a condition); "
                                       "stays with ExecuTorch")
            elif isinstance(node.target, torch._ops.HigherOrderOperator):
                rejected[node.name] = (f"control flow ({node.target.name()}) stays with "
                                       "ExecuTorch; TensorRT partitions hold plain ops")
            elif bad := _dtypes(node) & UNSUPPORTED_DTYPES:
                rejected[node.name] = f"dtype {sorted(map(str, bad))} has no TensorRT type"
        for node_name, op in untranslatable_nodes(ep).items():
            rejected.setdefault(node_name, f"no ONNX translation for {op}")
        return rejected

    def _propose(self, ep, supported: set[str]) -> list[list[torch.fx.Node]]:
        part = CapabilityBasedPartitioner(ep.graph_module, _Supported(supported),
                                          allows_single_node_partition=True)
        groups = []
        for p in part.propose_partitions():
            nodes = [n for n in p.nodes if n.target is not operator.getitem]
            if nodes:
                groups.append(sorted(p.nodes, key=lambda n: n.name))
        return groups

    def _attach_shape_values(self, groups: list[list[torch.fx.Node]], candidates: set[str],
                             rejected: dict[str, str]) -> list[list[torch.fx.Node]]:
        """Each partition computes the shape values it reads (shape_values.py)."""
        for node in attach(groups):
            candidates.add(node.name)
            rejected.pop(node.name, None)
        return [g for g in groups if any(n.target is not operator.getitem for n in g)]

    # -- checks with TensorRT -----------------------------------------------
    def _check(self, ep, nodes: list[torch.fx.Node], label: str) -> dict[str, str] | str:
        """Rejections for one partition: {} when its engine builds and its outputs
        agree with the graph; node -> reason where TensorRT names the nodes; a
        single reason (str) where the failure names no node (then it is split)."""
        names = {n.name for n in nodes}
        trt = load_tensorrt()
        self.report.builds += 1
        real = self._method_weights()
        try:
            sub_ep = extract_partition(ep, names, real)
            exported = export_onnx(sub_ep, self.compile_spec.precision)
        except Exception as e:  # noqa: BLE001 - the exporter raises many kinds
            return export_failure_reason(e)
        if scalars := scalar_input_readers(sub_ep, names):
            return scalars
        kind = engine_kind(self.compile_spec)
        all_real = not needs_stand_ins(ep, real)
        real_build = kind != "none" and all_real
        pointers, _alive = initializer_pointers(exported.weights, stand_ins=not real_build)
        if kind == "none" and exported.weight_bytes > CHECK_BUILD_MAX_WEIGHTS:
            # No engine is shipped, and a build costs twice the weights in
            # memory: TensorRT's full parse and the output check must do.
            if self.progress:
                self.progress(f"{label}: {exported.weight_bytes / 1e9:.2f} GB of weights; "
                              "checked by TensorRT's parser (the engine is built at load)")
            return self._parse_checks(trt, sub_ep, exported, names, pointers, all_real)
        bad = _parser_refusals(unsupported_node_reasons(trt, exported.onnx_bytes),
                               exported.edge_node_of, names)
        if bad:
            return bad
        try:  # parses the whole partition first: ParseFailure names the nodes
            build_engine(exported.onnx_bytes, self.compile_spec.build_options(), label=label,
                         profiles=input_profile_sets(sub_ep, self._profiles),
                         progress=self.progress, trt=trt,
                         initializers=pointers, keep_engine=real_build,
                         weights_id=weights_id(exported) if real_build else "stand-ins",
                         stripped=kind == "stripped")
        except ParseFailure as e:
            return self._parse_rejections(e, exported, names)
        except EngineBuildError as e:
            # Without the partition's label, equal causes read (and group) the same.
            return f"engine build failed: {str(e).replace(f' for {label}', '')}"
        return self._passed(sub_ep, exported, all_real,
                            output_mismatch(trt, sub_ep, exported.onnx_bytes, pointers))

    def _passed(self, sub_ep, exported, all_real: bool,
                mismatch: str | None) -> dict[str, str] | str:
        """The check's result; a partition that passed with its real weights
        offers its ONNX export to preprocess (self.export_cache)."""
        if mismatch:
            return mismatch
        if all_real:
            self.export_cache.offer(sub_ep, self.compile_spec.precision, exported)
        return {}

    @staticmethod
    def _parse_rejections(e: ParseFailure, exported, names: set[str]) -> dict[str, str] | str:
        bad = {exported.edge_node_of[i] for i in e.node_indices
               if i in exported.edge_node_of} & names
        return {n: str(e) for n in bad} if bad else str(e)

    def _parse_checks(self, trt, sub_ep, exported, names, pointers,
                      all_real: bool) -> dict[str, str] | str:
        """The checks short of a build: a full parse, then output agreement
        (output_mismatch parses too, so that is the full parse)."""
        try:
            return self._passed(sub_ep, exported, all_real,
                                output_mismatch(trt, sub_ep, exported.onnx_bytes, pointers))
        except ParseFailure as e:
            return self._parse_rejections(e, exported, names)

    def _method_weights(self) -> dict | None:
        index = len(self.reports)  # partition() appends its report when done
        return self.real_weights[index] if index < len(self.real_weights) else None

    def _check_or_split(self, ep, nodes: list[torch.fx.Node], label: str) -> dict[str, str]:
        """_check, and where the failure names no node, the partition split in two
        halves by topological order, recursively: halves that build are kept, the
        nodes that fail alone are rejected with the failure's reason."""
        result = self._check(ep, nodes, label)
        if isinstance(result, dict):
            return result
        compute = [n for n in nodes if n.target is not operator.getitem]
        if len(compute) <= 1:
            return {n.name: result for n in compute}
        if self._split_builds_left <= 0:
            return {n.name: f"{result} (splitting stopped: {self.max_builds} builds tried)"
                    for n in compute}
        order = {n: i for i, n in enumerate(ep.graph.nodes)}
        compute.sort(key=order.__getitem__)
        halves = [compute[:len(compute) // 2], compute[len(compute) // 2:]]
        out: dict[str, str] = {}
        for i, half in enumerate(halves):
            self._split_builds_left -= 1
            members = set(half)
            half = half + [n for n in nodes if n.target is operator.getitem
                           and n.args[0] in members]
            out.update(self._check_or_split(ep, half, f"{label}/{i}"))
        if not out:  # both halves build, the whole does not: keep the first
            out = {n.name: f"{result} (its half of the partition builds alone)"
                   for n in halves[1]}
        return out

    # -- Partitioner API ----------------------------------------------------
    def ops_to_not_decompose(self, ep) -> tuple[list, Callable[[torch.fx.Node], bool] | None]:
        """Ops kept whole through to_edge: those TensorRT translates whole (unless
        excluded), and those the partitioners after this one ask for. ExecuTorch
        asks partitioners in order and decomposes what the first leaves out, so
        without the second group `linear` would reach XNNPACK as permute + addmm."""
        groups: list[tuple[set, Callable | None]] = []
        own = [op for op in KEEP_WHOLE if op_name(op) not in self.exclude_ops]
        if own:
            groups.append((set(own), _before_edge))
        for partitioner in self.keep_whole:
            their_ops, their_check = partitioner.ops_to_not_decompose(ep)
            groups.append((set(their_ops), their_check))
        ops = list(dict.fromkeys(op for group, _ in groups for op in group))
        if not ops:
            return [], None

        def keep(node: torch.fx.Node) -> bool:
            return any(node.target in group and (check is None or check(node))
                       for group, check in groups)
        return ops, keep

    def partition(self, exported_program: torch.export.ExportedProgram) -> PartitionResult:
        ep = exported_program
        self.report = PartitionReport()
        self._split_builds_left = self.max_builds  # per method
        # Optimization profiles named as the user knows the dimensions, resolved
        # on the whole program to its symbols, which every partition shares.
        self._profiles = resolve_profiles(ep, self.compile_spec.profiles)
        delegation_spec = DelegationSpec(self.delegation_spec.backend_id, with_profiles(
            self.delegation_spec.compile_specs, resolved_option(self._profiles)))
        with quiet():
            rejected = self._initial_rejections(ep)
        candidates = {n.name for n in ep.graph.nodes
                      if n.op == "call_function" and n.target is not operator.getitem}
        if reason := options_error(self.compile_spec):
            rejected.update({n: reason for n in candidates - set(rejected)})
        for _ in range(_MAX_ROUNDS):
            rejected.update(unpaired_qdq(ep.graph, rejected))  # Q/DQ stay with their consumers
            groups = self._propose(ep, candidates - set(rejected))
            groups = self._attach_shape_values(groups, candidates, rejected)
            new = _escaping_shape_values(groups)
            for i, nodes in enumerate([] if new else groups):
                new.update(self._check_or_split(ep, nodes, f"partition {i} ({len(nodes)} nodes)"))
            if not new:
                break
            rejected.update(new)
        else:
            raise EngineBuildError(
                f"partitioning did not converge in {_MAX_ROUNDS} rounds; rejected so far: "
                f"{sorted(rejected)}")
        tags: dict[str, DelegationSpec] = {}
        for i, nodes in enumerate(groups):
            tag = f"tensorrt_{i}"
            tags[tag] = delegation_spec
            for node in nodes:
                node.meta["delegation_tag"] = tag
            self.report.partitions.append([n.name for n in nodes])
        tag_constant_data(ep)
        if self.state == "delegate":  # KV caches live in the partition (state.py)
            tag_owned_state(ep, self.report.state)
        else:
            mark_caller_caches(ep, self.report.state)
        self.report.rejected = rejected
        self.reports.append(self.report)
        return PartitionResult(tagged_exported_program=ep, partition_tags=tags)
