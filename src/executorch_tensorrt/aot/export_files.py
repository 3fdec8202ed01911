"""The files one export writes, staged beside the target and published as a set.

`model.pte` comes with companions named after it: `model.ptd` (external
weights), `model.report.json`, `model.expected` + `model.expected.etensors`,
and an ETRecord where the caller asks for one. They are written into the
export's staging folder (output_files.Staging), then published together: the
companions first, the program last, and an earlier export's companions that
this one does not write are removed before the program lands, so a new
program never sits beside an old reference or report (docs/output-files.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..output_files import Staging, writing
from ..program.references import expected_path, tensors_path
from ..tensorrt.engine_builder import Progress
from .partition.report import report_path


@dataclass
class ExportFiles:
    program: Path
    data: list[Path] = field(default_factory=list)  # .ptd files
    report: Path | None = None
    expected: Path | None = None
    etrecord: Path | None = None  # published with the set (in the program's folder)

    def companions(self) -> list[Path]:
        found = [*self.data, self.report, self.expected,
                 self.expected and tensors_path(self.expected), self.etrecord]
        return [p for p in found if p is not None]

    def moved_to(self, folder: Path) -> "ExportFiles":
        def there(p: Path | None) -> Path | None:
            return folder / p.name if p is not None else None

        return replace(self, program=folder / self.program.name,
                       data=[folder / p.name for p in self.data], report=there(self.report),
                       expected=there(self.expected), etrecord=there(self.etrecord))

    def publish(self, staging: Staging, target: Path) -> "ExportFiles":
        """Moves the staged set into place (the program last); returns the final paths."""
        final = self.moved_to(target.parent)
        staging.publish([*final.companions(), final.program], remove=companions_of(target))
        return final

    def names(self) -> list[str]:
        return [p.name for p in [*self.companions(), self.program]]


def companions_of(pte: Path) -> list[Path]:
    """What an earlier export of `pte` may have left beside it (the CLI names
    the ETRecord after the program)."""
    return [pte.with_suffix(".ptd"), report_path(pte), expected_path(pte), tensors_path(pte),
            pte.with_suffix(".etrecord")]


def rejected_folder(pte: Path) -> Path:
    """Where an export that failed its run check keeps its files for inspection."""
    return pte.parent / f"{pte.stem}.rejected"


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 100_000 else f"{nbytes} bytes"


def write_program(program, target: Path, staging: Staging,
                  progress: Progress | None) -> ExportFiles:
    """Streams the .pte (and any .ptd) for `target` into the staging folder:
    never one bytes object of the whole program."""
    staged = staging.write(target, program.write_to_file)
    files = ExportFiles(staged)
    if program._tensor_data:  # noqa: SLF001 - ExecuTorch has no public "has .ptd"
        files.data = [staged.parent / (tag if tag.endswith(".ptd") else f"{tag}.ptd")
                      for tag in program._tensor_data]  # noqa: SLF001
        with writing(staging.folder / files.data[0].name):
            program.write_tensor_data_to_file(str(staged.parent))
    if progress:
        progress(f"wrote {', '.join(f'{p} ({_size(p.stat().st_size)})' for p in [staged, *files.data])}"
                 " to the staging folder")
    return files


def beside(path: str | Path, pte: Path) -> bool:
    """Whether `path` is in the program's folder (so published with its set)."""
    return Path(path).parent.resolve() == pte.parent.resolve()
