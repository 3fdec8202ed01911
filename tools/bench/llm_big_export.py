"""An 8B-shaped LLM exported on this machine: peak memory against the weights,
and the first token against eager's (issue #24's last goal row).

    .venv/bin/python tools/bench/llm_big_export.py [--layers 32] [--folder DIR]
        [--max-seq-len 16] [--max-context-len 64]

A Llama-3-8B config (hidden 4096, intermediate 14336, 32 heads, 8 KV heads,
vocabulary 128,256, untied head) with `--layers` decoder layers. First a
checkpoint folder as a user has one: config.json and bf16 safetensors shards
of random weights (normal, std 0.02; norms 1), written shard by shard by this
script (nothing downloaded, never the whole model in memory). Then the
documented command, `executorch-tensorrt llm-export --model DIR --dtype
bfloat16 --external-weights`, as a child of this script: transformers maps
the shards and the export reads them from there. Every 0.25 s the script
reads the resident memory (/proc/PID/status: VmRSS, RssAnon, RssFile) of the
export process and of each process under it (the run check's child), and
stamps each line the export prints with the time and the memory then. At the
end: each process's peak, the peak of their sum, both against the weights'
bytes, the phase of each peak, and the run check's line (largest |diff| and
top-1 rows: the token eager picks after each prompt position, the last one
being the first generated token). Then, in a fresh process, the program's
logits on those inputs against eager PyTorch on the same checkpoint in bf16
and in fp32 (each module's weights cast as it runs: no fp32 copy), since the
CPU fallback computes bf16 programs in fp32. RssFile is mapped file pages (the
checkpoint's in the export, the .ptd's in the check), which the kernel can
drop and read again; RssAnon is memory that cannot be. Not a unit test: the
32-layer run writes 32 GB and takes several minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "rope_theta": 500000.0, "max_position_embeddings": 8192,
             "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "hidden_act": "silu",
             "bos_token_id": 128000, "eos_token_id": 128001}


def weight_bytes(layers: int) -> int:
    """bf16 bytes of the config's parameters (embedding, head, layers, norms)."""
    c = LLAMA3_8B
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
    return 2 * (2 * v * h + layers * layer + h)


def write_checkpoint(folder: Path, layers: int, seed: int = 0,
                     shard_bytes: int = 2 << 30) -> None:
    """config.json + bf16 safetensors shards (+ their index) of random weights,
    one shard in memory at a time: the layout transformers' save_pretrained
    writes and from_pretrained maps."""
    import torch
    import transformers
    from safetensors.torch import save_file

    config = transformers.AutoConfig.for_model(
        **{**LLAMA3_8B, "num_hidden_layers": layers, "dtype": "bfloat16"})
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in transformers.AutoModelForCausalLM
                  .from_config(config).state_dict().items()}
    generator = torch.Generator().manual_seed(seed)
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = 2 * int(torch.Size(shape).numel())
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    weight_map = {}
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name in names:
            t = torch.empty(shapes[name], dtype=torch.bfloat16)
            tensors[name] = t.fill_(1.0) if t.dim() == 1 else t.normal_(0.0, 0.02,
                                                                          generator=generator)
            weight_map[name] = file
        save_file(tensors, str(folder / file), metadata={"format": "pt"})
        print(f"  wrote {file} ({len(names)} tensors)", flush=True)
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": weight_bytes(layers)}, "weight_map": weight_map}))
    config.save_pretrained(str(folder))


def compare_first_token(folder: Path, max_seq_len: int, max_context_len: int) -> None:
    """The written program's logits on the run check's inputs (the CPU
    fallback: fp32 compute over the bf16 weights) against eager PyTorch on
    the same checkpoint computing in bf16 and in fp32: largest |diff| and the
    top-1 token of each row (the last row's is the first generated token)."""
    import gc

    import torch
    from transformers import AutoModelForCausalLM

    from executorch_tensorrt.aot.checks.run_check import load_program
    from executorch_tensorrt.llm.hf_export import hf_example_inputs
    from executorch_tensorrt.llm.reference import eager_logits

    inputs = hf_example_inputs(max_seq_len)
    os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    program = load_program(folder / "model.pte", folder / "model.ptd")
    logits = {"program": program.load_method("forward")(list(inputs))[0].float()}
    del program
    gc.collect()
    model = AutoModelForCausalLM.from_pretrained(str(folder / "checkpoint"),
                                                 local_files_only=True, dtype=torch.bfloat16)
    in_bf16, in_fp32 = eager_logits(model, max_context_len, 1, inputs)
    logits["eager bf16"], logits["eager fp32"] = in_bf16.float(), in_fp32
    for a, b in (("program", "eager bf16"), ("program", "eager fp32"),
                 ("eager bf16", "eager fp32")):
        print(f"  {a} vs {b}: largest |diff| {(logits[a] - logits[b]).abs().max():.4f}")
    for name, value in logits.items():
        print(f"  top-1 per row, {name}: {value.argmax(-1).flatten().tolist()}")
    top2 = logits["eager fp32"].topk(2, dim=-1).values.flatten(0, -2)
    print("  eager fp32's top-2 gap per row: "
          + ", ".join(f"{g:.3f}" for g in (top2[:, 0] - top2[:, 1]).tolist()), flush=True)


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


@dataclass
class Peaks:
    by_process: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> peak fields
    phase_at: dict[str, str] = field(default_factory=dict)  # role -> phase of its VmRSS peak
    total: int = 0
    total_anon: int = 0
    total_phase: str = ""
    phase: str = "starting"

    def sample(self, root: int) -> None:
        procs = {"export": root}
        for i, child in enumerate(_children(root)):
            procs[f"check child {i}" if i else "check child"] = child
        vm = anon = 0
        for role, pid in procs.items():
            s = _status(pid)
            if not s:
                continue
            peak = self.by_process.setdefault(role, {})
            if s.get("VmRSS", 0) > peak.get("VmRSS", 0):
                self.phase_at[role] = self.phase
            for key, value in s.items():
                peak[key] = max(peak.get(key, 0), value)
            vm, anon = vm + s.get("VmRSS", 0), anon + s.get("RssAnon", 0)
        if vm > self.total:
            self.total, self.total_phase = vm, self.phase
        self.total_anon = max(self.total_anon, anon)


def run_measured(cmd: list[str]) -> tuple[int, Peaks, list[str], float]:
    """Runs `cmd` (an export printing progress lines), sampling the resident
    memory of it and its children every 0.25 s and stamping each line it
    prints with the time and its memory: (exit status, peaks, run check
    lines, seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks, done = Peaks(), threading.Event()

    def sampler():
        while not done.is_set():
            peaks.sample(proc.pid)
            time.sleep(0.25)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    check_lines = []
    for line in proc.stdout:
        line = line.rstrip()
        now = _status(proc.pid).get("VmRSS", 0)
        print(f"[{time.monotonic() - start:7.1f} s, export {now / 1e9:5.2f} GB] {line}", flush=True)
        if line.startswith("[executorch_tensorrt]"):
            peaks.phase = line[len("[executorch_tensorrt]"):].strip()[:70]
        if "method 'forward': ran" in line or "did not run" in line:
            check_lines.append(line.strip())
    rc = proc.wait()
    done.set()
    thread.join()
    return rc, peaks, check_lines, time.monotonic() - start


def report_peaks(rc: int, peaks: Peaks, check_lines: list[str], seconds: float, weights: int,
                 what: str) -> None:
    """Each process's peak and the peak of their sum against `weights` bytes."""
    print(f"\nexit status {rc}, {seconds:.0f} s; {what} {weights / 1e9:.2f} GB")
    for role, peak in peaks.by_process.items():
        print(f"  {role}: peak VmRSS {peak.get('VmRSS', 0) / 1e9:.2f} GB "
              f"({peak.get('VmRSS', 0) / weights:.2f}x the {what}), RssAnon "
              f"{peak.get('RssAnon', 0) / 1e9:.2f} GB, RssFile {peak.get('RssFile', 0) / 1e9:.2f}"
              f" GB; at: {peaks.phase_at.get(role, '?')}")
    print(f"  both together: peak {peaks.total / 1e9:.2f} GB ({peaks.total / weights:.2f}x), "
          f"anonymous {peaks.total_anon / 1e9:.2f} GB ({peaks.total_anon / weights:.2f}x); "
          f"at: {peaks.total_phase}")
    print("  run check: " + ("; ".join(check_lines) or "no line"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--folder", default="/tmp/llm_big_export")
    ap.add_argument("--max-seq-len", type=int, default=16)
    ap.add_argument("--max-context-len", type=int, default=64)
    ap.add_argument("--compare-only", action="store_true",
                    help="only compare the program already in --folder with eager")
    args = ap.parse_args()
    folder = Path(args.folder)
    if args.compare_only:
        compare_first_token(folder, args.max_seq_len, args.max_context_len)
        return
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = folder / "checkpoint"
    checkpoint.mkdir(exist_ok=True)
    t0 = time.monotonic()
    print(f"writing a random bf16 checkpoint to {checkpoint}...", flush=True)
    write_checkpoint(checkpoint, args.layers)
    print(f"  {time.monotonic() - t0:.0f} s", flush=True)
    pte = folder / "model.pte"
    weights = weight_bytes(args.layers)
    cli = Path(sys.executable).with_name("executorch-tensorrt")
    cmd = [str(cli), "llm-export", "--model", str(checkpoint), "--max-seq-len",
           str(args.max_seq_len), "--max-context-len", str(args.max_context_len),
           "--dtype", "bfloat16", "--external-weights", str(pte)]
    print(f"{args.layers} layers, {weights / 1e9:.2f} GB of bf16 weights; load "
          f"{os.getloadavg()[0]:.1f}\n$ {' '.join(cmd)}", flush=True)
    rc, peaks, check_lines, seconds = run_measured(cmd)
    report_peaks(rc, peaks, check_lines, seconds, weights, "weights")
    if pte.exists():  # written even when the run check fails
        print("first token, in a fresh process (the program, then eager bf16 and fp32):",
              flush=True)
        subprocess.run([sys.executable, __file__, "--compare-only", "--folder", str(folder),
                        "--max-seq-len", str(args.max_seq_len), "--max-context-len",
                        str(args.max_context_len)], check=False)
    sys.exit(rc)


if __name__ == "__main__":
    main()
