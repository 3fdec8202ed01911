"""`executorch-tensorrt profile`: per-partition stage and node tables from
ETDump, through the real CLI (export --etrecord, then profile)."""
from __future__ import annotations

import re

from test_cli import FALLBACK, cli, imported_modules  # tests/tools is on sys.path


def test_profile_help_does_not_import_torch():
    r = cli("profile", "--help", python_options=("-X", "importtime"))
    assert r.returncode == 0, r.stderr
    assert "--nodes" in r.stdout and "--calls" in r.stdout
    heavy = sorted(m for m in imported_modules(r.stderr)
                   if m.split(".")[0] in ("torch", "executorch", "numpy"))
    assert heavy == [], heavy


def test_profile_prints_stage_and_node_tables(tmp_path):
    pte = tmp_path / "bitwise.pte"
    r = cli("export", "--example", "bitwise", "--etrecord", str(pte), env=FALLBACK)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "bitwise.etrecord").is_file()
    r = cli("profile", str(pte), "--calls", "4", "--nodes", env=FALLBACK)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("partition ") == 2 and "bitwise.etrecord" in out, out
    for stage in ("check+bind", "run", "copy out"):
        rows = re.findall(rf"^  {re.escape(stage)}\s+(\d+)\s", out, re.M)
        assert rows == ["4", "4"], (stage, out)  # one event per call per partition
    # node rows name their ATen ops through the ETRecord
    assert re.search(r"^  \S*sin\S*\s+4\s.*\bsin\b", out, re.M), out
    assert re.search(r"^  \S*cos\S*\s+4\s.*\bcos\b", out, re.M), out
