"""Third-party models, default export: how much TensorRT takes and why it leaves the rest.

Sixteen transformers models that no test zoo covers (detection, segmentation,
depth, speech, audio, vision-language, self-supervised vision, super-resolution,
time series), built from tiny configs with random weights (nothing is
downloaded), each exported with `export_program`'s default options (and a few in
fp16), run through `executorch.runtime` (TensorRT partitions through the
onnxruntime fallback: no GPU here), compared with eager, and its partition report
read: nodes on TensorRT, partitions, and for each node left outside the reason
the report gives (TensorRT's own words where TensorRT refused it).

    nice -n 19 .venv/bin/python tools/bench/third_party.py [--models dinov2 clip]
        [--timeout 1200] [--out docs/evidence/third-party.md]

Each model runs in its own child process (memory, isolation), one after the
other. Results are kept in `<out>.json` so a run of a few models updates their
rows and keeps the others; the table is rewritten from all rows each time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")

ROOT = Path(__file__).resolve().parents[2]  # tools/<role>/ -> the repository
OUT = ROOT / "docs" / "evidence" / "third-party.md"


# -- the models: (module, example inputs), seeded -------------------------------
def _randn(*shape, seed=1):
    import torch
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _ids(batch, n, vocab=100):
    import torch
    return torch.randint(3, vocab, (batch, n), generator=torch.Generator().manual_seed(2))


def _tiny_resnet(out_features, model_type="resnet", **extra):
    return {"model_type": model_type, "embedding_size": 8, "hidden_sizes": [8, 16, 16, 16],
            "depths": [1, 1, 1, 1], "layer_type": "basic", "out_features": out_features,
            **extra}


def _conditional_detr(t):
    config = t.ConditionalDetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False,
        backbone_config=_tiny_resnet(["stage2"]), d_model=16, encoder_layers=1,
        decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5, num_labels=3)
    return t.ConditionalDetrForObjectDetection(config), (_randn(1, 3, 64, 64),)


def _rt_detr(t):
    config = t.RTDetrConfig(
        backbone_config=_tiny_resnet(["stage2", "stage3", "stage4"], "rt_detr_resnet",
                                     layer_type="basic"),
        encoder_in_channels=[16, 16, 16], encoder_hidden_dim=16, encoder_ffn_dim=32,
        encoder_attention_heads=2, d_model=16, decoder_in_channels=[16, 16, 16],
        decoder_ffn_dim=32, decoder_attention_heads=2, decoder_layers=1, num_queries=10,
        num_labels=3, num_denoising=0, anchor_image_size=None,
        # The default (0.01) makes its encoder's features vanish: every query
        # scores the same and the top-k choice among ties is each runtime's own.
        initializer_range=0.3)
    return t.RTDetrForObjectDetection(config), (_randn(1, 3, 64, 64),)


def _mask2former(t):
    config = t.Mask2FormerConfig(
        backbone_config={"model_type": "swin", "image_size": 64, "embed_dim": 8,
                         "depths": [1, 1, 1, 1], "num_heads": [1, 1, 2, 2], "window_size": 4,
                         "out_features": ["stage1", "stage2", "stage3", "stage4"]},
        feature_size=32, mask_feature_size=32, hidden_dim=32, encoder_feedforward_dim=32,
        dim_feedforward=32, encoder_layers=1, decoder_layers=2, num_attention_heads=2,
        num_queries=5, num_labels=3, common_stride=4)
    return t.Mask2FormerForUniversalSegmentation(config), (_randn(1, 3, 64, 64),)


def _dpt(t):
    config = t.DPTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                         intermediate_size=64, image_size=32, patch_size=8,
                         backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 16, 16, 32],
                         fusion_hidden_size=16, head_in_index=-1,
                         initializer_range=0.3)  # the default's depth is ~1e-8: meaningless diffs
    return t.DPTForDepthEstimation(config), (_randn(1, 3, 32, 32),)


_SPEECH = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
               conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
               num_feat_extract_layers=2, num_conv_pos_embeddings=16,
               num_conv_pos_embedding_groups=2)


def _mobilevitv2(t):
    # At the default initializer range (0.02) its outputs are all zero.
    config = t.MobileViTV2Config(image_size=64, width_multiplier=0.25, initializer_range=0.3)
    return t.MobileViTV2Model(config), (_randn(1, 3, 64, 64),)


def _wavlm(t):
    config = t.WavLMConfig(**_SPEECH, num_buckets=16, max_bucket_distance=40)
    return t.WavLMModel(config), (_randn(1, 800),)


def _ast(t):
    config = t.ASTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, num_mel_bins=16, max_length=32, patch_size=8,
                         frequency_stride=4, time_stride=4, num_labels=3)
    return t.ASTForAudioClassification(config), (_randn(1, 32, 16),)


def _clip(t):
    config = t.CLIPConfig(
        text_config=dict(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=16, bos_token_id=1, eos_token_id=2),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, image_size=32, patch_size=8),
        projection_dim=16)
    return t.CLIPModel(config), (_ids(2, 16), _randn(2, 3, 32, 32))


def _siglip(t):
    config = t.SiglipConfig(
        text_config=dict(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=16),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, image_size=32, patch_size=8))
    return t.SiglipModel(config), (_ids(2, 16), _randn(2, 3, 32, 32))


def _dinov2(t):
    config = t.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            mlp_ratio=2, image_size=32, patch_size=8)
    return t.Dinov2Model(config), (_randn(1, 3, 48, 48),)  # positions resized to 6x6


def _beit(t):
    config = t.BeitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, image_size=32, patch_size=8,
                          use_relative_position_bias=True, num_labels=3)
    return t.BeitForImageClassification(config), (_randn(1, 3, 32, 32),)


def _convnextv2(t):
    config = t.ConvNextV2Config(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)
    return t.ConvNextV2Model(config), (_randn(1, 3, 32, 32),)


def _swin2sr(t):
    config = t.Swin2SRConfig(image_size=16, patch_size=1, embed_dim=16, depths=[1, 1],
                             num_heads=[2, 2], window_size=4, upscale=2,
                             upsampler="pixelshuffle")
    return t.Swin2SRForImageSuperResolution(config), (_randn(1, 3, 16, 16),)


def _patchtst(t):
    config = t.PatchTSTConfig(num_input_channels=3, context_length=32, patch_length=8,
                              patch_stride=8, prediction_length=8, d_model=16,
                              num_attention_heads=2, num_hidden_layers=1, ffn_dim=32)
    return t.PatchTSTForPrediction(config), (_randn(1, 32, 3),)


def _yolos(t):
    config = t.YolosConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, image_size=[32, 32], patch_size=8,
                           num_detection_tokens=5, num_labels=3)
    return t.YolosForObjectDetection(config), (_randn(1, 3, 48, 48),)


def _upernet(t):
    config = t.UperNetConfig(
        backbone_config={"model_type": "convnext", "hidden_sizes": [8, 16, 16, 16],
                         "depths": [1, 1, 1, 1], "layer_scale_init_value": 1.0,
                         "out_features": ["stage1", "stage2", "stage3", "stage4"]},
        hidden_size=16, use_auxiliary_head=False, num_labels=3,
        initializer_range=0.3)  # the default's logits are ~1e-3: meaningless diffs
    return t.UperNetForSemanticSegmentation(config), (_randn(1, 3, 128, 128),)


# name -> (builder, task); fp16 rows re-export a few of them with precision="fp16"
MODELS = {
    "conditional_detr": (_conditional_detr, "detection"),
    "rt_detr": (_rt_detr, "detection"),
    "yolos": (_yolos, "detection"),
    "mask2former": (_mask2former, "segmentation"),
    "upernet": (_upernet, "segmentation"),
    "dpt": (_dpt, "depth"),
    "wavlm": (_wavlm, "speech"),
    "ast": (_ast, "audio classification"),
    "clip": (_clip, "vision-language"),
    "siglip": (_siglip, "vision-language"),
    "dinov2": (_dinov2, "vision (self-supervised)"),
    "beit": (_beit, "vision"),
    "mobilevitv2": (_mobilevitv2, "vision (mobile)"),
    "convnextv2": (_convnextv2, "vision"),
    "swin2sr": (_swin2sr, "super-resolution"),
    "patchtst": (_patchtst, "time series"),
}
FP16 = ("rt_detr", "mask2former", "clip", "dinov2", "convnextv2", "wavlm")
CASES = [(m, "fp32") for m in MODELS] + [(m, "fp16") for m in FP16]


def build(name: str):
    import torch
    import transformers

    torch.manual_seed(0)
    model, inputs = MODELS[name][0](transformers)
    return model.eval(), inputs


# -- one case, in a child process ------------------------------------------------
def _reasons(report) -> list[dict]:
    """Nodes left outside TensorRT, grouped by (op, reason) as the report gives them."""
    groups: dict[tuple[str, str], list[str]] = {}
    for node, op in report.ops_of.items():
        if node not in report.nodes_on_tensorrt:
            reason = report.rejected.get(node, "not taken (no reason recorded)")
            groups.setdefault((op, reason), []).append(node)
    return [{"op": op, "reason": reason, "nodes": len(nodes), "examples": nodes[:3]}
            for (op, reason), nodes in sorted(groups.items(), key=lambda kv: -len(kv[1]))]


def _compare(got, want) -> tuple[float, float]:
    """(max |got - want|, that over the largest |want| of the same output), worst output."""
    import torch

    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, eager has {len(want)}")
    worst_abs = worst_rel = 0.0
    for g, w in zip(got, want):
        g = torch.as_tensor(g)
        if tuple(g.shape) != tuple(w.shape):
            raise AssertionError(f"output shape {tuple(g.shape)}, eager {tuple(w.shape)}")
        if not g.numel():
            continue
        diff = (g.double() - w.double()).abs().max().item()
        scale = max(w.double().abs().max().item(), 1e-12)
        worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, diff / scale)
    return worst_abs, worst_rel


def run_case(name: str, precision: str) -> dict:
    import torch
    import torch.utils._pytree as pytree
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.aot.partition.report import format_report

    model, inputs = build(name)
    with torch.no_grad():
        want = [t for t in pytree.tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
    row: dict = {"model": name, "task": MODELS[name][1], "precision": precision,
                 "class": type(model).__name__}
    options = {"precision": precision} if precision != "fp32" else {}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        try:
            result = export_program(model, inputs, Path(tmp) / f"{name}.pte", progress=None,
                                    **options)
        except Exception as e:  # recorded as the row's error, in the exporter's words
            row.update(export_s=time.perf_counter() - t, error=f"{type(e).__name__}: {e}")
            return row
        row["export_s"] = time.perf_counter() - t
        report = result.report
        row.update(nodes=len(report.ops_of), on_tensorrt=len(report.nodes_on_tensorrt),
                   partitions=len(report.partitions), reasons=_reasons(report),
                   table=format_report(result.reports))
        method = Runtime.get().load_program(str(result.path)).load_method("forward")
        got = method.execute(list(inputs))
        row["max_abs_diff"], row["max_rel_diff"] = _compare(got, want)
    return row


# -- the parent: children in sequence, the table --------------------------------
def _child(name: str, precision: str, timeout: float) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, __file__, "--child", name, precision, out.name]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"model": name, "precision": precision, "error": f"timed out after {timeout} s"}
        text = Path(out.name).read_text()
        if proc.returncode or not text:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            return {"model": name, "precision": precision,
                    "error": f"child exited {proc.returncode}: " + " | ".join(tail)}
        return json.loads(text)


def _versions() -> str:
    from importlib.metadata import version

    names = ("torch", "executorch", "transformers", "onnx", "onnxscript", "onnxruntime",
             "tensorrt-rtx-cu13", "executorch-tensorrt")
    found = []
    for n in names:
        try:
            found.append(f"{n} {version(n)}")
        except Exception:
            found.append(f"{n} (not installed)")
    return ", ".join(found)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(rows: list[dict]) -> str:
    full = [r for r in rows if "error" not in r and r["on_tensorrt"] == r["nodes"]]
    lines = ["# Third-party models, default export", "",
             f"Measured {date.today()} by `nice -n 19 .venv/bin/python tools/bench/third_party.py` "
             f"({os.cpu_count()} CPU cores, {platform.machine()}, no GPU: engines built by "
             "TensorRT-RTX, programs run through `executorch.runtime` with TensorRT partitions "
             "on the onnxruntime fallback).", "", f"Versions: {_versions()}.", "",
             "transformers models from tiny configs with random weights (nothing downloaded), none "
             "of them in a test zoo; `export_program` with default options (`precision=\"fp16\"` "
             "for the fp16 rows). Nodes: edge compute nodes on TensorRT / all. Diff: the largest "
             "|program - eager| over all outputs, and that over the largest |eager| of the same "
             "output. Export seconds include the export's own run check, on 2 shared cores.", "",
             f"**{len(full)} of {len(rows)} fully on TensorRT.**", "",
             "| model | class | task | precision | fully on TensorRT | nodes | partitions "
             "| max abs diff | relative | export s | left outside TensorRT, and why |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r.get('class', '')} | {r.get('task', '')} "
                         f"| {r['precision']} | error | | | | | {r.get('export_s', 0):.1f} "
                         f"| {_cell(r['error'])[:600]} |")
            continue
        why = "; ".join(f"{g['nodes']} x `{g['op']}`: {_cell(g['reason'])[:400]}"
                        for g in r["reasons"]) or ""
        lines.append(f"| {r['model']} | {r['class']} | {r['task']} | {r['precision']} "
                     f"| {'y' if r['on_tensorrt'] == r['nodes'] else 'n'} "
                     f"| {r['on_tensorrt']}/{r['nodes']} | {r['partitions']} "
                     f"| {r['max_abs_diff']:.2e} | {r['max_rel_diff']:.2e} "
                     f"| {r['export_s']:.1f} | {why} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS),
                        help="only these (their fp32 and fp16 rows); the others' rows are kept")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per model")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "PRECISION", "JSON"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, precision, out = args.child
        Path(out).write_text(json.dumps(run_case(name, precision)))
        return 0

    from executorch_tensorrt.output_files import write_bytes_whole

    out = Path(args.out)
    store = out.with_suffix(".json")
    rows = {(r["model"], r["precision"]): r
            for r in (json.loads(store.read_text()) if store.exists() else [])}
    cases = [c for c in CASES if not args.models or c[0] in args.models]
    t0 = time.perf_counter()
    for i, (name, precision) in enumerate(cases, 1):
        print(f"[{i}/{len(cases)}] {name} {precision}: exporting ...", flush=True)
        row = _child(name, precision, args.timeout)
        rows[(name, precision)] = row
        if "error" in row:
            status = f"error: {row['error'][:300]}"
        else:
            status = (f"{row['on_tensorrt']}/{row['nodes']} nodes on TensorRT in "
                      f"{row['partitions']} partition(s), max diff {row['max_abs_diff']:.1e} "
                      f"(relative {row['max_rel_diff']:.1e}), export {row['export_s']:.1f} s")
            for g in row["reasons"]:
                status += f"\n    {g['nodes']} x {g['op']}: {' '.join(g['reason'].split())[:300]}"
        print(f"[{i}/{len(cases)}] {name} {precision}: {status} "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    ordered = [rows[c] for c in CASES if c in rows]
    write_bytes_whole(store, json.dumps(ordered, indent=1) + "\n")
    write_bytes_whole(out, table(ordered))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
