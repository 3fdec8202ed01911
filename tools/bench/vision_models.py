"""Fallback vs XNNPACK on third-party vision models (issue #21, part 4).

Builds small vision transformers (ViT, LeViT, Swin V2) and CNNs (ResNet-18,
MobileNetV2, EfficientNet-B0) from transformers configs with random weights
(torchvision's PyPI wheel does not import with the CPU torch here), exports
each once through this backend and once through ExecuTorch's XNNPACK
partitioner, and times `Method.execute` of both in one child process per
model and thread count, at the same thread budget: onnxruntime's intra-op threads (EXECUTORCH_TENSORRT_ORT_THREADS,
read when a method is loaded) and ExecuTorch's threadpool (which XNNPACK
uses) both set to each count in --threads. Batches of the two sides alternate
so load on the shared machine hits both alike; the cell is the median batch.

    nice -n 19 .venv/bin/python tools/bench/vision_models.py [--models vit levit]
        [--threads 1 2] [--calls 10] [--repeats 7] [--folder DIR] [--write]

--folder keeps (and reuses) the exported programs, so a runtime-only change
is re-timed without re-exporting; --write replaces the "Vision models"
section of docs/benchmarks.md. Exporting and timing reuse models.py's
functions and executorch_tensorrt.cli.runner's load_method / time_calls.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from models import ROOT, export_tensorrt, export_xnnpack, max_diff  # tools/bench/models.py

SECTION = "## Vision models: fallback vs XNNPACK"


def _vit():
    from transformers import ViTConfig, ViTModel
    return ViTModel(ViTConfig(hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                              intermediate_size=768, image_size=224, patch_size=16),
                    add_pooling_layer=False), 224


def _levit():
    from transformers import LevitConfig, LevitModel
    return LevitModel(LevitConfig()), 224  # LeViT-128S, the config's default


def _swinv2():
    from transformers import Swinv2Config, Swinv2Model
    return Swinv2Model(Swinv2Config(embed_dim=48, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16],
                                    image_size=224, window_size=7)), 224


def _resnet18():
    from transformers import ResNetConfig, ResNetModel
    return ResNetModel(ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2],
                                    hidden_sizes=[64, 128, 256, 512])), 224


def _mobilenet_v2():
    from transformers import MobileNetV2Config, MobileNetV2Model
    return MobileNetV2Model(MobileNetV2Config()), 224


def _efficientnet_b0():
    from transformers import EfficientNetConfig, EfficientNetModel
    return EfficientNetModel(EfficientNetConfig()), 224


# name -> (builder, kind): kind "attention" rows are the transformer goal
MODELS = {"vit": (_vit, "attention"), "levit": (_levit, "attention"),
          "swinv2": (_swinv2, "attention"), "resnet18": (_resnet18, "cnn"),
          "mobilenet_v2": (_mobilenet_v2, "cnn"), "efficientnet_b0": (_efficientnet_b0, "cnn")}


def build(name: str):
    """(eval module returning one tensor, example inputs), seeded."""
    import torch

    class FirstOutput(torch.nn.Module):  # transformers return ModelOutput dataclasses
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            return self.model(pixel_values=pixel_values)[0]

    # torch's 2 OpenMP threads stalled for minutes on the loaded shared cores; the
    # eager reference and the export need no speed
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, size = MODELS[name][0]()
    return FirstOutput(model.eval()).eval(), build_inputs(name)


def build_inputs(name: str, size: int = 224):
    """The example image of every model, seeded: the same in parent and child."""
    import torch

    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1)),)


@dataclass
class Row:
    model: str
    threads: int
    ours_ms: float
    xnnpack_ms: float
    ours_diff: float
    xnnpack_diff: float

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.xnnpack_ms


def export_both(name: str, folder: Path) -> tuple[Path, Path]:
    """The two programs and the eager output (`<name>-eager.npy`), made once."""
    import numpy as np
    import torch

    trt, xnn, eager = (folder / f"{name}-trt.pte", folder / f"{name}-xnn.pte",
                       folder / f"{name}-eager.npy")
    if not (trt.exists() and xnn.exists() and eager.exists()):
        print(f"[vision] {name}: exporting", file=sys.stderr, flush=True)
        model, inputs = build(name)
        with torch.no_grad():
            np.save(eager, model(*inputs).numpy())
        if not (trt.exists() and xnn.exists()):
            export_tensorrt(model, inputs, trt)
            export_xnnpack(model, inputs, xnn)
    return trt, xnn


def time_pair(name: str, trt: Path, xnn: Path, threads: int, calls: int,
              repeats: int) -> Row:
    """In a child process (main): ExecuTorch's threadpool reset, when it came
    after loading, crashed (glibc's `__pthread_tpp_change_priority` assertion,
    SIGABRT; SIGSEGV) or hung here (docs/benchmarks.md), so a crash or a hang
    (--child-timeout) loses one row, after one retry; the eager output comes
    from the parent's .npy."""
    import numpy as np
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    from executorch_tensorrt.cli.runner import load_method, time_calls

    torch.manual_seed(0)
    inputs = build_inputs(name)
    eager = torch.from_numpy(np.load(trt.parent / f"{name}-eager.npy"))
    os.environ["EXECUTORCH_TENSORRT_ORT_THREADS"] = str(threads)  # read at load
    # ExecuTorch's pool (XNNPACK's threads), resized before any method exists:
    # XNNPACK's runtime keeps the pool it was loaded with, and resizing it
    # after loading crashed (SIGABRT/SIGSEGV) most 1-thread children here.
    _unsafe_reset_threadpool(threads)
    ours, peer = load_method(trt), load_method(xnn)
    args = list(inputs)
    samples: dict[str, list[float]] = {"ours": [], "xnnpack": []}
    for side, method in (("ours", ours), ("xnnpack", peer)):  # warm both
        time_calls(lambda: method.execute(args), calls=2, repeats=1, warmup=2)
    for _ in range(repeats):  # alternate batches: shared-machine load hits both
        for side, method in (("ours", ours), ("xnnpack", peer)):
            samples[side].append(time_calls(lambda: method.execute(args), calls=calls,
                                            repeats=1, warmup=0).median_ms)
    return Row(name, threads, statistics.median(samples["ours"]),
               statistics.median(samples["xnnpack"]),
               max_diff(ours.execute(args)[0], eager), max_diff(peer.execute(args)[0], eager))


def table(rows: list[Row], calls: int, repeats: int, note: str,
          missing: list[str] = ()) -> list[str]:
    import torch

    load = os.getloadavg()
    lines = [SECTION, "",
             f"Measured {time.strftime('%Y-%m-%d')} by `tools/bench/vision_models.py` on "
             f"{platform.machine()} "
             f"({os.cpu_count()} CPU cores shared with other jobs, load average "
             f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end), torch "
             f"{torch.__version__}, random weights, one child process per model and thread count "
             "with both sides in it. Both sides at the same thread "
             "budget (onnxruntime intra-op threads = ExecuTorch threadpool threads), batches of "
             f"{calls} calls alternating between the two sides, median of {repeats} batches. "
             "\"ours\" is the TensorRT partition run by the onnxruntime fallback on the CPU.",
             ""]
    if note:
        lines += [note, ""]
    if missing:
        lines += ["Not measured: " + "; ".join(missing) + ".", ""]
    lines += ["| model | threads | ours (ms) | XNNPACK (ms) | ours / XNNPACK | "
              "max diff vs eager (ours / XNNPACK) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {r.threads} | {r.ours_ms:.2f} | {r.xnnpack_ms:.2f} | "
                     f"{r.ratio:.2f}x | {r.ours_diff:.1e} / {r.xnnpack_diff:.1e} |")
    for threads in sorted({r.threads for r in rows}):
        ratios = [r.ratio for r in rows if r.threads == threads]
        lines.append(f"| **median** | {threads} | | | **{statistics.median(ratios):.2f}x** | |")
    return lines


def write_section(lines: list[str], out: Path) -> None:
    """Replaces this benchmark's section of docs/benchmarks.md (or appends it)."""
    text = out.read_text()
    head, _, rest = text.partition(SECTION)
    tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
    out.write_text(head.rstrip() + "\n\n" + "\n".join(lines) + "\n" + tail)


def _run_child(name: str, threads: int, folder: Path, args):
    """The finished child, or why it gave no row (crashed, hung past the timeout)."""
    command = [sys.executable, __file__, "--child", name, str(threads), "--folder", str(folder),
               "--calls", str(args.calls), "--repeats", str(args.repeats)]
    try:  # on timeout, subprocess kills the child
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True,
                              timeout=args.child_timeout)
    except subprocess.TimeoutExpired:
        return f"killed after {args.child_timeout:.0f} s without a result"
    if done.returncode != 0 or not done.stdout.strip():
        return f"failed, exit {done.returncode}"
    return done


def main() -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--folder", help="keep and reuse the exported programs here")
    parser.add_argument("--note", default="", help="a line printed above the table")
    parser.add_argument("--write", action="store_true", help="update docs/evidence/benchmarks.md")
    parser.add_argument("--child-timeout", type=float, default=900,
                        help="seconds before a timing child is killed and its row reported "
                             "missing (ExecuTorch's threadpool reset has hung here)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # model, threads
    args = parser.parse_args()
    if args.child:
        name, threads = args.child[0], int(args.child[1])
        folder = Path(args.folder)
        row = time_pair(name, folder / f"{name}-trt.pte", folder / f"{name}-xnn.pte", threads,
                        args.calls, args.repeats)
        print(json.dumps(asdict(row)), flush=True)
        return 0
    folder = Path(args.folder or tempfile.mkdtemp(prefix="bench_vision_"))
    folder.mkdir(parents=True, exist_ok=True)
    rows, missing = [], []
    for name in args.models:
        export_both(name, folder)
        for threads in args.threads:  # one child each: a crash or hang loses one row
            done = _run_child(name, threads, folder, args)
            if isinstance(done, str):  # the reset's crash is intermittent: one more try
                print(f"[vision] {name} @{threads}: child {done}; retrying once",
                      file=sys.stderr, flush=True)
                done = _run_child(name, threads, folder, args)
            if isinstance(done, str):
                missing.append(f"{name} at {threads} thread(s) ({done})")
                print(f"[vision] {name} @{threads}: child {done}", file=sys.stderr,
                      flush=True)
                continue
            rows.append(Row(**json.loads(done.stdout.strip().splitlines()[-1])))
            r = rows[-1]
            print(f"[vision] {name} @{threads}: ours {r.ours_ms:.2f} ms, XNNPACK "
                  f"{r.xnnpack_ms:.2f} ms, {r.ratio:.2f}x", file=sys.stderr, flush=True)
    lines = table(rows, args.calls, args.repeats, args.note, missing)
    print("\n".join(lines))
    if args.write:
        write_section(lines, ROOT / "docs" / "benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
