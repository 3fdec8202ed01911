"""What TensorRT took from each method, per ATen op, and why it left the rest.

Like ExecuTorch's `get_delegation_info`, but with the parser's or builder's own
reason for every node TensorRT did not take. `export` prints it when TensorRT
takes only part of a method, fails naming it when TensorRT takes nothing, and
writes it beside the program as `<model>.report.json` (`read_report`), so the
CLI can show it for a written program (`format_report`).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ...output_files import write_bytes_whole

REPORT_FORMAT = "executorch-tensorrt-report/1"
_EXAMPLES = 3  # node names kept per (op, reason) in the compact form


@dataclass
class PartitionReport:
    """One method's partitioning. Node names are the edge graph's."""
    partitions: list[list[str]] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)     # node -> reason
    ops_of: dict[str, str] = field(default_factory=dict)       # node -> op name
    builds: int = 0                                            # engine builds tried
    state: dict[str, str] = field(default_factory=dict)        # buffer fqn -> where it lives
    # Linear layer -> how it runs ("int4 weight-only (group 64)") or
    # "not quantized: <why>" (quantization.quantize(), docs/quantization.md).
    quantization: dict[str, str] = field(default_factory=dict)

    @property
    def nodes_on_tensorrt(self) -> set[str]:
        return {n for part in self.partitions for n in part} & set(self.ops_of)

    def as_dict(self) -> dict:
        """Compact, JSON-ready: per op, the node counts and each reason once."""
        taken = self.nodes_on_tensorrt
        ops: dict[str, dict] = {}
        for node, op in self.ops_of.items():
            row = ops.setdefault(op, {"op": op, "on_tensorrt": 0, "elsewhere": 0, "reasons": {}})
            if node in taken:
                row["on_tensorrt"] += 1
                continue
            row["elsewhere"] += 1
            reason = self.rejected.get(node, "not taken (no reason recorded)")
            entry = row["reasons"].setdefault(reason, {"nodes": 0, "examples": []})
            entry["nodes"] += 1
            if len(entry["examples"]) < _EXAMPLES:
                entry["examples"].append(node)
        rows = sorted(ops.values(), key=lambda r: (-r["elsewhere"], r["op"]))
        for row in rows:
            row["reasons"] = [{"reason": r, **e} for r, e in row["reasons"].items()]
        return {"partitions": len(self.partitions), "nodes_on_tensorrt": len(taken),
                "nodes": len(self.ops_of), "engine_builds": self.builds, "ops": rows,
                **({"state": dict(self.state)} if self.state else {}),
                **({"quantization": dict(self.quantization)} if self.quantization else {})}

    def to_table(self) -> str:
        return format_method("", self.as_dict())

    def main_reasons(self, limit: int = 3) -> list[str]:
        """The most frequent reasons nodes stayed off TensorRT, most frequent first."""
        counts = Counter(self.rejected[n] for n in self.ops_of
                         if n in self.rejected and n not in self.nodes_on_tensorrt)
        return [f"{r} ({c} node{'s' if c != 1 else ''})" for r, c in counts.most_common(limit)]


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def format_method(method: str, data: Mapping, *, reason_width: int = 600) -> str:
    """A table of one method's report (`PartitionReport.as_dict()` form)."""
    title = f"method {method!r}: " if method else ""
    lines = [f"{title}TensorRT took {data['nodes_on_tensorrt']} of {data['nodes']} nodes in "
             f"{data['partitions']} partition(s)"]
    rows = data["ops"]
    width = max([len("op")] + [len(r["op"]) for r in rows])
    lines.append(f"  {'op':<{width}}  {'TensorRT':>8}  {'elsewhere':>9}")
    for r in rows:
        lines.append(f"  {r['op']:<{width}}  {r['on_tensorrt']:>8}  {r['elsewhere']:>9}")
        for entry in r["reasons"]:
            examples = ", ".join(entry["examples"])
            lines.append(f"      {entry['nodes']} x {_shorten(entry['reason'], reason_width)} "
                         f"[{examples}{', ...' if entry['nodes'] > len(entry['examples']) else ''}]")
    for fqn, where in data.get("state", {}).items():  # mutable buffers (docs/llm.md)
        lines.append(f"  state {fqn}: {_shorten(where, reason_width)}")
    for layer, how in data.get("quantization", {}).items():
        lines.append(f"  layer {layer}: {_shorten(how, reason_width)}")
    return "\n".join(lines)


def reports_as_dict(reports: Mapping[str, PartitionReport]) -> dict:
    return {"format": REPORT_FORMAT,
            "methods": {name: r.as_dict() for name, r in reports.items()}}


def format_report(report) -> str:
    """Text table for a PartitionReport, a {method: PartitionReport} mapping, or
    the dict `read_report` returns."""
    if isinstance(report, PartitionReport):
        return report.to_table()
    if isinstance(report, Mapping) and report.get("format") == REPORT_FORMAT:
        methods = report["methods"]
    elif isinstance(report, Mapping):
        methods = {k: v.as_dict() if isinstance(v, PartitionReport) else v
                   for k, v in report.items()}
    else:
        raise TypeError(f"cannot format a {type(report).__name__} as a partition report")
    return "\n".join(format_method(name, data) for name, data in methods.items())


def report_path(pte_path: str | Path) -> Path:
    """`model.pte` -> `model.report.json`."""
    return Path(pte_path).with_suffix(".report.json")


def write_report(pte_path: str | Path, reports: Mapping[str, PartitionReport]) -> Path:
    return write_bytes_whole(report_path(pte_path),
                             json.dumps(reports_as_dict(reports), indent=1) + "\n")


def read_report(pte_path: str | Path) -> dict:
    """The report export wrote beside `pte_path` (a .pte or the .report.json)."""
    path = Path(pte_path)
    path = path if path.name.endswith(".report.json") else report_path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: export writes it beside the .pte it writes; a program "
            "written otherwise (or moved without it) has no partition report")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a partition report: {e}") from None
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT \
            or not isinstance(data.get("methods"), dict):
        raise ValueError(f"{path} is not a partition report (format {REPORT_FORMAT} expected)")
    for method, entry in data["methods"].items():
        if problem := _malformed(entry):
            raise ValueError(f"{path}: method {method!r} of the partition report is malformed: "
                             f"{problem}")
    return data


def _malformed(entry) -> str | None:
    """Why a method entry of a report file cannot be formatted (files are untrusted)."""
    if not isinstance(entry, dict):
        return "not an object"
    for key in ("partitions", "nodes_on_tensorrt", "nodes"):
        if not isinstance(entry.get(key), int):
            return f"{key!r} is not an integer"
    if not isinstance(entry.get("ops"), list):
        return "'ops' is not a list"
    for row in entry["ops"]:
        if not (isinstance(row, dict) and isinstance(row.get("op"), str)
                and isinstance(row.get("on_tensorrt"), int)
                and isinstance(row.get("elsewhere"), int)
                and isinstance(row.get("reasons"), list)):
            return f"op row {str(row)[:80]} lacks op/on_tensorrt/elsewhere/reasons"
        for r in row["reasons"]:
            if not (isinstance(r, dict) and isinstance(r.get("reason"), str)
                    and isinstance(r.get("nodes"), int) and isinstance(r.get("examples"), list)):
                return f"a reason of {row['op']} lacks reason/nodes/examples"
    return None
