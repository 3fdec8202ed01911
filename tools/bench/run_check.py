"""Export time with the run check vs without, and the check over the zoo.

    nice -n 19 .venv/bin/python tools/bench/run_check.py [--repeats 2] [--zoo]

Ratio: each model is exported alternately with run_check=False and True,
`--repeats` times each, in this one process (the first, warm-up export of
each model is not counted); the ratio is the median with over the median
without. Models: every built-in example, the zoo's hf_resnet (a transformers
ResNet from its config, random weights), and mlp67m (tools/bench/big_models.py,
64 MB: above the in-process limit, so its check runs in a child process).
`--zoo`: the models above, the ViTDet/SAM position-embedding block and every
zoo model (tests/aot/zoo.py) exported once with the check on: how many export
but fail to run, each one's largest |diff| and tolerance, and the check's
share of that export's time (timed inside the same export: the ratio
total / (total - check) on a machine too busy for the A/B above).
`--phases`: mlp67m exported once, then its check run in fresh interpreters
the way export's child runs it, each phase timed (wall and CPU): imports,
reference read, program load, method load (the onnxruntime session), run,
compare; `extension` = how the child starts (export_check.CHILD_START: torch
and ExecuTorch's extension), `runtime` = through `executorch.runtime` (as
before), alternately, `--repeats` times each.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "aot"))
sys.path.insert(0, str(ROOT / "tools" / "bench"))


def _pos_embed():
    """The issue-21 pattern: conv -> NHWC -> * scale + pos[1, H, W, C] -> NCHW -> conv."""
    import torch

    class PosEmbed(torch.nn.Module):
        def __init__(self, c: int = 256):
            super().__init__()
            torch.manual_seed(0)
            self.patch = torch.nn.Conv2d(3, c, 4, 4)
            self.scale = torch.nn.Parameter(torch.rand(c) + 0.5)
            self.pos = torch.nn.Parameter(torch.randn(1, 8, 8, c))
            self.head = torch.nn.Conv2d(c, 4, 1)

        def forward(self, x):
            y = self.patch(x).permute(0, 2, 3, 1) * self.scale + self.pos
            return self.head(y.permute(0, 3, 1, 2))

    return PosEmbed().eval(), (torch.randn(1, 3, 32, 32),)


def models(zoo_too: bool):
    from executorch_tensorrt.examples.models import example
    from executorch_tensorrt.examples.names import EXAMPLE_NAMES

    import zoo

    import big_models

    out = {f"example {n}": (lambda n=n: example(n)) for n in EXAMPLE_NAMES}
    out["zoo hf_resnet"] = zoo.BY_NAME["hf_resnet"].build
    out["mlp67m"] = lambda: big_models.build_model("mlp67m")
    if zoo_too:
        out["vitdet/sam pos-embed"] = _pos_embed
        out.update({f"zoo {e.name}": e.build for e in zoo.ZOO if e.name != "hf_resnet"})
    return out


def export_once(build, folder: str, run_check: bool):
    from executorch_tensorrt.aot.export import RunCheckError, export_program

    model, inputs = build()
    start = time.perf_counter()
    try:
        result = export_program(model, inputs, Path(folder) / "m.pte", progress=None,
                                run_check=run_check)
        check, spent = result.run_check, result.seconds.get("run_check", 0.0)
    except RunCheckError as e:
        check, spent = e.check, float("nan")
    return time.perf_counter() - start, spent, check


PHASES = ("imports: torch + ExecuTorch", "imports: executorch_tensorrt", "reference read",
          "program load", "method load (onnxruntime session)", "run", "compare")


def phases_child(start: str, folder: str) -> None:
    """In a fresh interpreter: the check's phases, timed; prints one JSON line."""
    marks, last = [], (time.perf_counter(), time.process_time())

    def mark() -> None:
        nonlocal last
        now = (time.perf_counter(), time.process_time())
        marks.append([now[0] - last[0], now[1] - last[1]])
        last = now

    if start == "runtime":
        import executorch.runtime  # noqa: F401  (imports torch and executorch.exir)
    else:
        import torch  # noqa: F401
        from executorch.extension.pybindings import _C  # noqa: F401
    mark()
    from executorch_tensorrt.aot.checks.run_check import load_program, stored_case
    from executorch_tensorrt.program import tensor_file as tf
    from executorch_tensorrt.program.compare import compare_tensors
    from executorch_tensorrt.runtime.executor import FALLBACK_ENV, FALLBACK_ONNXRUNTIME
    mark()
    case = stored_case(Path(folder) / "m.expected.etensors", "example inputs")
    mark()
    os.environ[FALLBACK_ENV] = FALLBACK_ONNXRUNTIME
    program = load_program(Path(folder) / "m.pte", None)
    mark()
    method = program.load_method("forward")
    mark()
    outputs = method(list(case.inputs))
    mark()
    got = [tf.from_torch(f"output.{i}", o) for i, o in enumerate(outputs)]
    ok = all(r.ok for r in compare_tensors(case.expected, got, 1e-3, 0.0))
    mark()
    print(json.dumps({"ok": ok, "phases": marks}))


def phases(repeats: int) -> None:
    import big_models

    from executorch_tensorrt.aot.export import export_program

    with tempfile.TemporaryDirectory(prefix="bench_check_phases_") as folder:
        model, inputs = big_models.build_model("mlp67m")
        export_program(model, inputs, Path(folder) / "m.pte", progress=None, run_check=False)
        runs = {"extension": [], "runtime": []}
        for _ in range(repeats):
            for start in runs:
                out = subprocess.run([sys.executable, __file__, "--phases-child", start, folder],
                                     capture_output=True, text=True, check=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                assert row["ok"], row
                runs[start].append(row["phases"])
    print("| phase | " + " | ".join(f"{s}: wall s | {s}: CPU s" for s in runs) + " |")
    print("|---|" + "---|---|" * len(runs))
    for i, name in enumerate(PHASES + ("whole",)):
        cells = []
        for rows in runs.values():
            for k in (0, 1):
                per = [sum(r[j][k] for j in range(len(PHASES))) if name == "whole" else r[i][k]
                       for r in rows]
                cells.append(f"{statistics.median(per):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    import warnings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--zoo", action="store_true")
    ap.add_argument("--only", nargs="*", help="A/B only these models (names as printed)")
    ap.add_argument("--phases", action="store_true", help="time the check child's phases")
    ap.add_argument("--phases-child", nargs=2, metavar=("START", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if args.phases_child:
        return phases_child(*args.phases_child)
    if args.phases:
        return phases(args.repeats)
    with tempfile.TemporaryDirectory(prefix="bench_run_check_") as folder:
        if args.zoo:
            print("| model | ran | largest \\|diff\\| | tolerance | executors | export s | "
                  "of which the check | total / (total - check) |")
            print("|---|---|---|---|---|---|---|---|")
            failed = 0
            for name, build in models(True).items():
                total, spent, check = export_once(build, folder, True)
                failed += not check.ok
                for m in check.methods:
                    diff = "-" if m.max_abs_diff is None else f"{m.max_abs_diff:.3g}"
                    tol = "-" if m.tolerance is None else f"{m.tolerance:.3g}"
                    print(f"| {name} | {'yes' if m.ran else 'NO: ' + m.error[:120]} | {diff} | "
                          f"{tol} | {', '.join(m.executors)} | {total:.2f} | {spent:.2f} | "
                          f"{total / (total - spent):.3f} |", flush=True)
            print(f"\n{failed} program(s) exported but failed the run check")
            return
        print("| model | export s without | with | ratio | check ok |")
        print("|---|---|---|---|---|")
        for name, build in models(False).items():
            if args.only and name not in args.only:
                continue
            export_once(build, folder, False)  # warm-up: first-use imports and caches
            times = {False: [], True: []}
            ok = True
            for _ in range(args.repeats):
                for flag in (False, True):
                    seconds, _, check = export_once(build, folder, flag)
                    times[flag].append(seconds)
                    ok = ok and (check is None or check.ok)
            off, on = statistics.median(times[False]), statistics.median(times[True])
            print(f"| {name} | {off:.2f} | {on:.2f} | {on / off:.2f} | {'yes' if ok else 'NO'} |",
                  flush=True)


if __name__ == "__main__":
    main()
