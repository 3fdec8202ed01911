"""The onnxruntime fallback on weights its transpose optimizer re-lays out
(docs/evidence/named-data.md): outputs against eager and resident memory.

Exports a SAM/ViTDet-style block (patch Conv -> NHWC -> + pos -> LayerNorm ->
MLP -> NCHW -> Conv, ~23 MB fp32, weights in a .ptd) at fp32 and fp16
precision (the fallback upcasts the latter into float32 copies), then in one
child process each loads it through executorch.runtime with the fallback,
runs it once and reports the largest difference from eager and RSS above the
child's baseline after load and after the call, plus the peak (VmHWM).
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


def export(folder: Path, precision: str) -> Path:
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

    torch.manual_seed(0)
    model = Block().eval()
    pte = folder / f"block-{precision}.pte"
    export_program(model, (_input(),), str(pte), progress=None, external_weights=True,
                   run_check=False, write_expected_file=False, precision=precision)
    with torch.no_grad():
        torch.save(model(_input()), pte.with_suffix(".eager.pt"))
    return pte


def _input():
    import torch

    return torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))


def child(pte: str) -> dict:
    import executorch_tensorrt  # noqa: F401
    from executorch.runtime import Runtime
    import torch

    want = torch.load(pte[:-4] + ".eager.pt")
    x = _input()
    base = _kb("VmRSS")
    method = Runtime.get().load_program(pte, data_path=pte[:-4] + ".ptd").load_method("forward")
    row = {"after_load": _kb("VmRSS") - base}
    row["diff"] = float((method.execute([x])[0] - want).abs().max())
    row["after_call"] = _kb("VmRSS") - base
    row["peak"] = _kb("VmHWM") - base
    return row


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2])))
        return
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    print("| precision | .ptd | max abs diff vs eager | RSS after load | after one call | peak |")
    print("| --- | --- | --- | --- | --- | --- |")
    env = {"EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime", "PATH": "/usr/bin:/bin"}
    for precision in ("fp32", "fp16"):
        pte = export(folder, precision)
        out = subprocess.run([sys.executable, __file__, "--child", str(pte)],
                             capture_output=True, text=True, env=env, timeout=600)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {precision} | {pte.with_suffix('.ptd').stat().st_size / 1e6:.1f} MB "
              f"| {row['diff']:.2g} | {row['after_load'] / 1e6:.1f} MB "
              f"| {row['after_call'] / 1e6:.1f} MB | {row['peak'] / 1e6:.1f} MB |")


if __name__ == "__main__":
    main()
