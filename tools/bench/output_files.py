"""What writing an export whole costs: time and peak disk, over an earlier program.

    .venv/bin/python tools/bench/output_files.py [--model linear1g] [--repeat 3]
        [--out docs/evidence/output-files.md]

Exports the model once into a fresh folder (the earlier set), then `--repeat`
times over it, with `external_weights=True` and the run check on (as a user
would). For each export over the earlier set it measures, in this process:
- the export's wall time, and the time spent in the staging machinery
  (`Staging` set-up, `publish`: waiting for the files' sync, the renames and
  the folder sync; and the clean-up);
- what a plain overwrite would pay anyway to release the earlier files'
  blocks (truncating a written, synced scratch file of the earlier set's size:
  the renames free the earlier files the same way), so the cost of writing
  whole is staging - release, and the time ratio is total / (total - that);
- the folder's peak disk use (every file under it, staging folder included,
  sampled every 10 ms) against the earlier set's size and the new set's size.
Models: tools/bench/big_models.py's (mlp67m = 67 MB; linear1g = 1.05 GB).
Not a unit test; tests/tools/test_bench_output_files.py runs a small version.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_models import build_model  # noqa: E402


def folder_bytes(folder: Path) -> int:
    """Bytes allocated to every file under `folder` (st_blocks), staging included."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass  # renamed or removed between the listing and the stat
    return total


class PeakDisk:
    """Samples folder_bytes every `period` seconds in a thread; `peak` is the largest."""

    def __init__(self, folder: Path, period: float = 0.01):
        self.folder, self.period, self.peak = folder, period, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, folder_bytes(self.folder))
            self._stop.wait(self.period)

    def __enter__(self) -> "PeakDisk":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, folder_bytes(self.folder))


class StagingTime:
    """Adds up the seconds spent inside output_files.Staging's set-up, publish
    and clean-up while active."""

    def __init__(self):
        from executorch_tensorrt import output_files

        self.seconds = 0.0
        self._module = output_files
        self._saved = {}

    def _timed(self, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return wrapper

    def __enter__(self) -> "StagingTime":
        cls = self._module.Staging
        for name in ("__enter__", "__exit__", "publish"):
            self._saved[name] = getattr(cls, name)
            setattr(cls, name, self._timed(self._saved[name]))
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self._saved.items():
            setattr(self._module.Staging, name, fn)


def release_seconds(nbytes: int, folder: Path) -> float:
    """Seconds to truncate a written, synced file of `nbytes` in `folder`: what
    open(path, "wb") over the earlier program costs a plain writer."""
    scratch = folder / ".release-scratch"
    chunk = b"\x5a" * (16 << 20)
    with open(scratch, "wb") as f:
        for _ in range(0, nbytes, len(chunk)):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    start = time.perf_counter()
    os.truncate(scratch, 0)
    seconds = time.perf_counter() - start
    scratch.unlink()
    return seconds


def measure(model_name: str, repeat: int, folder: Path) -> dict:
    import executorch_tensorrt
    from executorch_tensorrt.aot.export import export_program

    model, inputs = build_model(model_name)
    pte = folder / "model.pte"
    os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    export_program(model, inputs, pte, external_weights=True, progress=None)
    earlier = folder_bytes(folder)
    runs = []
    for _ in range(repeat):
        release = release_seconds(earlier, folder)
        before = folder_bytes(folder)
        with PeakDisk(folder) as disk, StagingTime() as staging:
            start = time.perf_counter()
            export_program(model, inputs, pte, external_weights=True, progress=None)
            total = time.perf_counter() - start
        new = folder_bytes(folder)
        leftovers = sorted(p.name for p in folder.iterdir() if p.name.startswith(".etrt-"))
        cost = max(0.0, staging.seconds - release)
        runs.append({"total_s": total, "staging_s": staging.seconds, "release_s": release,
                     "cost_s": cost, "time_ratio": total / (total - cost),
                     "earlier_bytes": before, "new_bytes": new, "peak_bytes": disk.peak,
                     "peak_over_earlier_plus_new": disk.peak / (before + new),
                     "leftovers": leftovers})
    del executorch_tensorrt
    return {"model": model_name, "weights_bytes": sum(p.numel() * p.element_size()
                                                      for p in model.parameters()),
            "earlier_set_bytes": earlier, "runs": runs}


def table(result: dict) -> str:
    rows = ["| run | export (s) | in staging (s) | release by a plain overwrite (s) | time ratio "
            "| earlier set | new set | peak disk | peak / (earlier + new) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(result["runs"], 1):
        rows.append(f"| {i} | {r['total_s']:.2f} | {r['staging_s']:.3f} | {r['release_s']:.3f} | "
                    f"{r['time_ratio']:.3f} | {r['earlier_bytes'] / 1e6:.1f} MB | "
                    f"{r['new_bytes'] / 1e6:.1f} MB | {r['peak_bytes'] / 1e6:.1f} MB | "
                    f"{r['peak_over_earlier_plus_new']:.3f} |")
    ratios = [r["time_ratio"] for r in result["runs"]]
    rows.append(f"\nMedian time ratio {statistics.median(ratios):.3f}; largest peak / "
                f"(earlier + new) {max(r['peak_over_earlier_plus_new'] for r in result['runs']):.3f}.")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="linear1g")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", help="folder to export into (default: a new temporary one)")
    ap.add_argument("--out", help="write the Markdown record here")
    ap.add_argument("--json", action="store_true", help="print the raw result as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = measure(args.model, args.repeat, Path(tmp))
    if args.json:
        print(json.dumps(result))
    text = table(result)
    print(text)
    if args.out:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        Path(args.out).write_text(
            "# Writing an export whole: time and disk\n\n"
            "Task page: [output-files.md](../output-files.md). Regenerate with\n"
            f"`.venv/bin/python tools/bench/output_files.py --model {args.model} "
            f"--repeat {args.repeat} --out {args.out}`.\n\n"
            f"Measured {stamp} on this project's development machine (2 cores, local disk): "
            f"`{args.model}` ({result['weights_bytes'] / 1e6:.0f} MB of fp32 weights), "
            "`external_weights=True`, run check on, exported over the earlier set each time.\n\n"
            + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
