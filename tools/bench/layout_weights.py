"""Memory cost of handing onnxruntime its own copies of the weights its
transpose optimizer may re-lay out (issue #21, docs/named-data.md).

Exports a SAM/ViTDet-style block (patch Conv -> NHWC -> + pos -> LayerNorm ->
MLP -> NCHW -> Conv, ~23 MB fp32, weights in a .ptd), then in one child
process per mode loads it through executorch.runtime with the onnxruntime
fallback and reports RSS above the child's baseline after load and after one
call, plus the peak (VmHWM):
  fix       - this package as shipped (elementwise-read weights copied)
  inplace   - every weight in place (the old behaviour; loads, cannot run)
  allcopied - every weight copied (the peer for "copy them all")
Usage: python tools/bench/layout_weights.py [folder]
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def export(folder: Path) -> Path:
    import torch
    from executorch_tensorrt.aot.export import export_program

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = torch.nn.Conv2d(3, 768, 16, 16)
            self.pos = torch.nn.Parameter(torch.randn(1, 14, 14, 768))
            self.norm = torch.nn.LayerNorm(768)
            self.up, self.down = torch.nn.Linear(768, 3072), torch.nn.Linear(3072, 768)
            self.neck = torch.nn.Conv2d(768, 256, 1)

        def forward(self, x):
            y = self.patch(x).permute(0, 2, 3, 1) + self.pos
            y = y + self.down(torch.nn.functional.gelu(self.up(self.norm(y))))
            return self.neck(y.permute(0, 3, 1, 2))

    pte = folder / "block.pte"
    export_program(Block().eval(), (torch.randn(1, 3, 224, 224),), str(pte), progress=None,
                   external_weights=True)
    return pte


def child(pte: str, mode: str) -> dict:
    import executorch_tensorrt  # noqa: F401
    from executorch_tensorrt.runtime.onnxruntime import executor
    from executorch.runtime import Runtime
    import torch

    if mode != "fix":
        def every_or_none(model, names):
            return frozenset(names) if mode == "allcopied" else frozenset()
        executor.layout_movable = every_or_none
    base = _kb("VmRSS")
    method = Runtime.get().load_program(pte, data_path=pte[:-4] + ".ptd").load_method("forward")
    row = {"mode": mode, "after_load": _kb("VmRSS") - base}
    try:
        method.execute([torch.randn(1, 3, 224, 224)])
        row["ran"] = True
    except RuntimeError:
        row["ran"] = False
    row["after_call"] = _kb("VmRSS") - base
    row["peak"] = _kb("VmHWM") - base
    return row


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2], sys.argv[3])))
        return
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    pte = export(folder)
    weights = pte.with_suffix(".ptd").stat().st_size
    print(f"| mode | runs | RSS after load | after one call | peak | (.ptd {weights / 1e6:.1f} MB) |")
    print("| --- | --- | --- | --- | --- | --- |")
    env = {"EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime", "PATH": "/usr/bin:/bin"}
    for mode in ("fix", "inplace", "allcopied"):
        out = subprocess.run([sys.executable, __file__, "--child", str(pte), mode],
                             capture_output=True, text=True, env=env, timeout=600)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {mode} | {'yes' if row['ran'] else 'no'} | {row['after_load'] / 1e6:.1f} MB "
              f"| {row['after_call'] / 1e6:.1f} MB | {row['peak'] / 1e6:.1f} MB | |")


if __name__ == "__main__":
    main()
