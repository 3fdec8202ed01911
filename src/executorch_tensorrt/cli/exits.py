"""How a command ends: the exit codes, `Fail` (a command's own refusal), and
`classify` (an exception a command let through -> exit code and message).
Imports nothing heavy: the parser's help text lists the codes."""
from __future__ import annotations

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_RUN, EXIT_EXPORT = 0, 1, 2, 3, 4
EXIT_NO_TENSORRT = 5  # doctor, selftest: TensorRT cannot run engines here

EXIT_CODES = """exit codes:
  0  success
  1  checked and wrong: outputs differ from the reference (verify, demo),
     or inspect --device-resident found a problem
  2  usage: bad arguments, a missing file or one of the wrong kind, an
     unknown method, a malformed reference or tensor file, an output file
     that cannot be written
  3  the program could not be loaded or run (the backend's cause is printed)
  4  export failed
  5  TensorRT cannot run engines on this machine (doctor: the reason is
     printed; selftest: each program says why, the rest passed)
Set EXECUTORCH_TENSORRT_DEBUG=1 for Python tracebacks."""


class Fail(Exception):
    """A command's own refusal: the message to print and the exit code (main.py)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def classify(e: Exception) -> tuple[int, str]:
    """Exit code and message for an exception a command let through."""
    from ..program.references import ExpectedError
    from ..program.tensor_file import TensorFileError
    from .runner import RunError, UsageError

    if isinstance(e, (UsageError, ExpectedError, TensorFileError)):
        return EXIT_USAGE, str(e)
    if isinstance(e, RunError):
        return EXIT_RUN, str(e)
    if isinstance(e, OSError) and e.filename:
        return EXIT_USAGE, f"{e.filename}: {e.strerror}"
    from ..errors import ExportError, OutputWriteError

    if isinstance(e, OutputWriteError):  # an output of a command other than export
        return EXIT_USAGE, str(e)
    if isinstance(e, ExportError):
        return EXIT_EXPORT, str(e)
    return EXIT_RUN, f"{type(e).__name__}: {e}"
