"""The run check at export (issue 21, part 2; aot/checks/run_check.py): export runs
the program it wrote once through executorch.runtime (TensorRT first, the
onnxruntime fallback here, where no GPU runs engines) and compares with eager.

Real exports, real runs, no mocks. Programs that export but must not pass are
made honestly: a model whose output is random (the program's random numbers
are not eager's), and a program whose TensorRT blob is damaged on disk after
export wrote it and before the check read it (export's own progress callback
fires between the two). `verify MODEL.pte` without a reference runs every
method on generated inputs, integers inside the recorded index ranges."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import child_env, tensorrt_blobs
from executorch_tensorrt import cli
from executorch_tensorrt.aot.export import RunCheckError, export_program
from executorch_tensorrt.aot.checks.export_check import from_json, to_json
from executorch_tensorrt.aot.checks.run_check import safe_int_range
from executorch_tensorrt.program.info import read_program
from executorch_tensorrt.runtime.executor import FALLBACK_ENV

X = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Noisy(torch.nn.Module):
    """Exports and runs, but its output is random: never equal to eager's."""

    def forward(self, x):
        return torch.relu(x) + torch.rand_like(x)


class Lookup(torch.nn.Module):
    """An embedding of 5 rows: ids outside 0..4 are refused (issue 19)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(5, 4)

    def forward(self, ids):
        return self.emb(ids) * 2.0


def damage_blob_when_written(pte):
    """A progress callback that flips one byte in the middle of the written
    program's first TensorRT blob as soon as export says it wrote the file
    (into its staging folder, before the run check and the publish)."""
    def progress(message: str) -> None:
        if message.startswith("wrote "):
            staged = Path(message.split()[1])
            assert staged.name == pte.name and staged.parent.parent == pte.parent, message
            data = bytearray(staged.read_bytes())
            blob = tensorrt_blobs(bytes(data))[0]
            at = bytes(data).index(blob) + len(blob) // 2
            data[at] ^= 0xFF
            staged.write_bytes(bytes(data))
    return progress


def only_files(folder: Path) -> set[str]:
    """The names in `folder`, staging folders included (there must be none)."""
    return {p.name for p in folder.iterdir()}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    pte = tmp_path_factory.mktemp("run_check") / "small.pte"
    return pte, export_program(Small().eval(), (X,), pte, progress=None)


def test_export_runs_the_program_and_compares_with_eager(good, no_fallback):
    pte, result = good
    check = result.run_check
    assert check.ok and not check.skipped, check.describe()
    (m,) = check.methods
    assert (m.method, m.ran, m.compared, m.executors) == ("forward", True, True, ("onnxruntime",))
    assert m.inputs == "example inputs"
    assert 0 <= m.max_abs_diff <= 1e-5 < m.tolerance
    # The largest of the 4 scores sits where eager's does, in both rows.
    assert m.top1 == (2, 2) and "top-1 equal in 2 of 2 rows" in m.describe()
    assert from_json(to_json(check)) == check  # what a check child hands back
    assert "run_check" in result.seconds
    # The check allowed the fallback for itself only.
    assert FALLBACK_ENV not in os.environ


def test_a_program_that_differs_from_eager_is_not_published_and_kept_aside(tmp_path,
                                                                           allow_fallback):
    """A failed run check leaves the earlier program in place and keeps the
    new files, whole, in `<stem>.rejected/` for inspection."""
    pte = tmp_path / "noisy.pte"
    pte.write_bytes(b"the earlier program")
    with pytest.raises(RunCheckError) as info:
        export_program(Noisy(), (X,), pte, progress=None)
    (m,) = info.value.check.failures()
    assert m.ran and m.compared and m.max_abs_diff > m.tolerance
    text = str(info.value)
    assert "method 'forward' ran but differs from eager" in text and "run_check=False" in text
    assert f"{pte} was not published" in text and "noisy.rejected" in text
    assert pte.read_bytes() == b"the earlier program"
    kept = tmp_path / "noisy.rejected"
    assert info.value.path == kept / "noisy.pte" and info.value.target == pte
    assert only_files(kept) == {"noisy.pte", "noisy.expected", "noisy.expected.etensors",
                                "noisy.report.json"}
    assert only_files(tmp_path) == {"noisy.pte", "noisy.rejected"}
    # The kept program is the one that ran: it loads and runs.
    assert cli.main(["run", str(kept / "noisy.pte")]) == 0


def test_a_program_that_cannot_run_fails_export_naming_the_cause(tmp_path):
    pte = tmp_path / "damaged.pte"
    with pytest.raises(RunCheckError) as info:
        export_program(Small().eval(), (X,), pte, progress=damage_blob_when_written(pte))
    (m,) = info.value.check.methods
    assert not m.ran and m.method == "forward"
    # The backend's own cause, not only ExecuTorch's error code.
    assert "TensorRTBackend" in m.error, m.error
    assert "could not run" in str(info.value) and "--no-run-check" in str(info.value)


def test_run_check_false_writes_the_damaged_program_and_verify_catches_it(tmp_path, capsys):
    pte = tmp_path / "damaged.pte"
    result = export_program(Small().eval(), (X,), pte, write_expected_file=False,
                            run_check=False, progress=damage_blob_when_written(pte))
    assert result.run_check is None and "run_check" not in result.seconds
    code = cli.main(["verify", str(pte)])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "method 'forward': did not run (generated inputs)" in out


def test_verify_without_reference_runs_every_method(tmp_path, capsys):
    pte = tmp_path / "plain.pte"
    export_program(Small().eval(), (X,), pte, write_expected_file=False, run_check=False,
                   progress=None)
    assert cli.main(["verify", str(pte)]) == 0
    out = capsys.readouterr().out
    assert "method 'forward': ran on onnxruntime (generated inputs" in out


def test_generated_integers_stay_inside_the_recorded_index_range(tmp_path, capsys):
    pte = tmp_path / "lookup.pte"
    ids = torch.tensor([[0, 4, 2], [1, 3, 0]])
    result = export_program(Lookup().eval(), (ids,), pte, write_expected_file=False,
                            progress=None)
    # No reference written: the check ran the model eagerly itself and compared.
    assert result.run_check.ok and result.run_check.methods[0].compared
    # Generated ids of 0..15 would be refused by the program's own input check.
    assert cli.main(["verify", str(pte)]) == 0, capsys.readouterr().out
    low, high = safe_int_range(read_program(pte))
    assert 0 <= low < high <= 5  # the embedding's 5 rows bound the generated ids


def test_every_method_of_a_multi_method_program_is_run(tmp_path):
    pte = tmp_path / "two.pte"
    programs = {"forward": torch.export.export(Small().eval(), (X,)),
                "other": torch.export.export(Lookup().eval(), (torch.tensor([[1, 2]]),))}
    result = export_program(programs, None, pte, progress=None)
    by_name = {m.method: m for m in result.run_check.methods}
    assert set(by_name) == {"forward", "other"}
    assert by_name["forward"].compared and by_name["forward"].ok
    assert by_name["other"].ran and not by_name["other"].compared
    assert by_name["other"].inputs == "generated inputs"


def test_cli_export_prints_the_check_and_exits_4_when_it_fails(tmp_path, capsys):
    good_pte = tmp_path / "add.pte"
    assert cli.main(["export", "--example", "add", str(good_pte)]) == 0
    assert "method 'forward': ran on onnxruntime (example inputs), matches eager" in \
        capsys.readouterr().out
    code = cli.main(["export", "--example", "add", str(tmp_path / "x.pte"),
                     "--run-check-tolerance", "0"])
    assert code == 2 and "--run-check-tolerance must be > 0" in capsys.readouterr().err
    source = tmp_path / "noisy_model.py"
    source.write_text("import torch\n\nclass Noisy(torch.nn.Module):\n"
                      "    def forward(self, x):\n        return x + torch.rand_like(x)\n\n"
                      "def make():\n    return Noisy(), (torch.randn(2, 8),)\n")
    noisy = tmp_path / "noisy.pte"
    assert cli.main(["export", f"{source}:make", str(noisy)]) == 4
    assert "the run check of the exported program failed: method 'forward' ran but differs" \
        in capsys.readouterr().err
    assert not noisy.exists() and (tmp_path / "noisy.rejected" / "noisy.pte").is_file()
    assert cli.main(["export", f"{source}:make", str(noisy), "--no-run-check"]) == 0


def test_the_child_process_check_starts_early_and_catches_a_program_that_cannot_run(
        tmp_path, monkeypatch):
    """Above the in-process limit (here: every program) the check runs in a
    child started before lowering (its imports overlap the export); it still
    fails export on a damaged program with the backend's cause."""
    from executorch_tensorrt.aot.checks import export_check

    monkeypatch.setattr(export_check, "IN_PROCESS_LIMIT", 0)
    events = []
    start = export_check.start_check_child
    monkeypatch.setattr("executorch_tensorrt.aot.export.start_check_child",
                        lambda: events.append("child started") or start())
    pte = tmp_path / "damaged.pte"
    damage = damage_blob_when_written(pte)

    def progress(message):
        events.append(message.split()[0])
        damage(message)

    with pytest.raises(RunCheckError) as info:
        export_program(Small().eval(), (X,), pte, progress=progress)
    (m,) = info.value.check.methods
    assert not m.ran and m.method == "forward"
    assert "TensorRTBackend" in m.error, m.error
    assert events.index("child started") < events.index("wrote"), events
    # The same program undamaged passes through the child.
    result = export_program(Small().eval(), (X,), tmp_path / "good.pte", progress=None)
    assert result.run_check.ok and result.run_check.methods[0].compared
    assert events.count("child started") == 2


def test_the_check_child_runs_the_program_without_importing_the_compiler(good):
    """The child export starts for a big program loads ExecuTorch through its
    runtime extension: `executorch.runtime` imports `executorch.exir` (the
    compiler, 70 % of the child's import time), which the check never uses.
    Read from the child's own import log (-X importtime), on a real check."""
    from executorch_tensorrt.aot.checks import export_check

    pte, _ = good
    args = {"path": str(pte), "data": None,
            "references": {"forward": [str(pte.with_suffix(".expected.etensors")),
                                       "example inputs"]},
            "tolerance": 1e-3, "int_range": [0, 16]}
    run = subprocess.run([sys.executable, "-X", "importtime", "-c", export_check.CHILD_START, "-"],
                         input=json.dumps(args) + "\n", capture_output=True, text=True,
                         env=child_env(), timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    check = export_check.from_json(run.stdout.strip().splitlines()[-1])
    assert check.ok and check.methods[0].compared, check.describe()
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
                if line.startswith("import time:")}
    assert "executorch.extension.pybindings._C" in imported  # the log is read right
    assert not {"executorch.exir", "executorch.runtime"} & imported
