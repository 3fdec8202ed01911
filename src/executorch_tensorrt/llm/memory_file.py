"""The memory report of a written LLM program (program/memory_report.py),
added as "memory" to the partition report export wrote beside it
(`<model>.report.json`), so tools read the same figures `inspect` prints."""
from __future__ import annotations

import json
from pathlib import Path

from ..aot.partition.report import report_path
from ..output_files import write_bytes_whole
from ..program.memory_report import MemoryReport, memory_report_of


def record_memory_report(pte_path: str | Path) -> MemoryReport:
    report = memory_report_of(pte_path)
    path = report_path(pte_path)
    if path.is_file():
        data = json.loads(path.read_text())
        data["memory"] = report.to_json()
        write_bytes_whole(path, json.dumps(data, indent=1) + "\n")
    return report
