"""optimum-executorch's fill-mask, image-classification and
text2text-generation tasks through `main_export(..., recipe="tensorrt")`:
optimum's own `ExecuTorchModelFor*` class loads the written `model.pte` and
runs it (TensorRT partitions through onnxruntime here), and its outputs equal
eager transformers'; every method's nodes are on TensorRT. optimum lives in
build/optimum-site, so each export and run happens in a child interpreter
with it on the path (as in test_optimum_recipe.py)."""
from __future__ import annotations

import json

import pytest

from encoder_decoder_checks import assert_projected_once, cross_states, decoder_blob
from test_optimum_recipe import _child

COMMON = """
import json, os, sys, torch, transformers
import executorch_tensorrt
from optimum.exporters.executorch import main_export
from optimum.executorch import (ExecuTorchModelForImageClassification,
                                ExecuTorchModelForMaskedLM, ExecuTorchModelForSeq2SeqLM)
folder = sys.argv[1]
torch.manual_seed(0)

def export(model, task, recipe_kwargs=None, **kwargs):
    model.save_pretrained(folder + "/model")
    progs = main_export(folder + "/model", task=task, recipe="tensorrt",
                        output_dir=folder + "/out", local_files_only=True,
                        recipe_kwargs={"progress": None, **(recipe_kwargs or {})}, **kwargs)
    reports = progs["model"].result.export.reports
    return {"files": sorted(os.listdir(folder + "/out")),
            "coverage": {m: [sorted(r.rejected), len(r.partitions)] for m, r in reports.items()}}

def refused(call):
    try:
        call()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
"""

FILL_MASK = COMMON + """
config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                 num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=16)
model = transformers.BertForMaskedLM(config).eval()
report = export(model, "fill-mask")
et = ExecuTorchModelForMaskedLM.from_pretrained(folder + "/out")
diffs = []
for length in (5, 15):  # the sequence length is dynamic in optimum's trace
    ids = torch.randint(0, 64, (1, length))
    mask = torch.ones_like(ids)
    got = et.forward(ids, mask)
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
    diffs.append([list(got.shape) == list(want.shape), float((got - want).abs().max())])
report["diffs"] = diffs
report["refused"] = refused(lambda: main_export(
    folder + "/model", task="fill-mask", recipe="tensorrt", output_dir=folder + "/out2",
    local_files_only=True, recipe_kwargs={"max_seq_len": 8}))
from optimum.exporters.executorch.recipe_registry import recipe_registry
report["not_a_task"] = refused(lambda: recipe_registry["tensorrt"](torch.nn.Linear(2, 2)))
print(json.dumps(report))
"""

IMAGE_CLASSIFICATION = COMMON + """
config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32,
                                num_hidden_layers=1, num_attention_heads=4,
                                intermediate_size=64, num_labels=5)
model = transformers.ViTForImageClassification(config).eval()
report = export(model, "image-classification", {"dtype": "float16"})
et = ExecuTorchModelForImageClassification.from_pretrained(folder + "/out")
pixels = torch.rand(1, 3, 32, 32, dtype=torch.float16)
got = et.forward(pixels)
with torch.no_grad():
    want = model.half()(pixel_values=pixels).logits
report["diffs"] = [[got.dtype == want.dtype == torch.float16,
                    float((got.float() - want.float()).abs().max())]]
report["get_dtype"] = int(et.model.run_method("get_dtype")[0])
print(json.dumps(report))
"""

TEXT2TEXT = COMMON + """
config = transformers.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                               num_heads=4, decoder_start_token_id=0,
                               eos_token_id=1, pad_token_id=0, initializer_factor=8.0)
model = transformers.T5ForConditionalGeneration(config).eval()
report = export(model, "text2text-generation", max_seq_len=16)
et = ExecuTorchModelForSeq2SeqLM.from_pretrained(folder + "/out")
runs = []
for prompt in ([5, 6, 7, 8, 9, 10, 11], [40, 41, 2, 93, 17]):
    ids = torch.tensor([prompt])
    got = et.generate(ids, max_seq_len=12)
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=11, do_sample=False, num_beams=1)
    runs.append([got, want[0].tolist()])
report["runs"] = runs
# Position 1 reads the keys/values kept at position 0, whatever encoder output comes again.
hidden = et.model.run_method("encoder", (torch.tensor([[5, 6, 7]]),))[0]
def second_step(again):
    for position, states in ((0, hidden), (1, again)):
        logits = et.model.run_method("text_decoder", (
            torch.tensor([[0]]), states, torch.tensor([position])))[0]
    return logits
report["ignored"] = float((second_step(hidden) - second_step(hidden * 0 + 1)).abs().max())
report["refused"] = refused(lambda: main_export(
    folder + "/model", task="text2text-generation", recipe="tensorrt",
    output_dir=folder + "/out2", local_files_only=True,
    recipe_kwargs={"quantize": "int8_weight_only"}))
print(json.dumps(report))
"""


def _run(script: str, tmp_path) -> dict:
    done = _child(script, str(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _all_on_tensorrt(report: dict, methods: list[str]) -> None:
    """Each exported method is one TensorRT partition with nothing rejected."""
    assert report["coverage"] == {m: [[], 1] for m in methods}, report["coverage"]
    # optimum's classes load model.pte alone: the weights are in it.
    assert report["files"] == ["model.pte", "model.report.json"], report["files"]


def test_fill_mask_runs_in_optimums_masked_lm_class_as_eager(tmp_path, allow_fallback):
    report = _run(FILL_MASK, tmp_path)
    _all_on_tensorrt(report, ["forward"])
    for same_shape, diff in report["diffs"]:
        assert same_shape and diff < 1e-4, report["diffs"]
    assert report["refused"].startswith("TypeError") and "max_seq_len" in report["refused"] \
        and "fill-mask" in report["refused"], report["refused"]
    # A module of no task the recipe has: the tasks it has, by optimum's module class.
    assert report["not_a_task"].startswith("ValueError") and "Linear" in report["not_a_task"] \
        and "text2text-generation (Seq2SeqLMExportableModule)" in report["not_a_task"]


def test_image_classification_in_float16_runs_in_optimums_class_as_eager(tmp_path,
                                                                          allow_fallback):
    """recipe_kwargs dtype="float16": the program takes and returns float16,
    says so in optimum's get_dtype (ScalarType Half), and matches eager fp16."""
    report = _run(IMAGE_CLASSIFICATION, tmp_path)
    _all_on_tensorrt(report, ["forward"])
    (same_dtype, diff), = report["diffs"]
    assert same_dtype and diff < 1e-2, report["diffs"]
    assert report["get_dtype"] == 5


def test_t5_generates_eagers_greedy_tokens_in_optimums_seq2seq_class(tmp_path, allow_fallback):
    """encoder, text_decoder (self-attention cache and cross-attention
    keys/values owned by TensorRT) and sampler: ExecuTorchModelForSeq2SeqLM.generate
    decodes transformers' greedy tokens for two prompts of different lengths
    in a row (the caches start over at position 0)."""
    report = _run(TEXT2TEXT, tmp_path)
    _all_on_tensorrt(report, ["encoder", "text_decoder", "sampler"])
    for got, want in report["runs"]:
        assert len(got) > 3 and got == want, report["runs"]
    # Cross-attention keys/values: projected at position 0 only, then kept.
    decoder = decoder_blob(tmp_path / "out" / "model.pte")
    assert sorted(cross_states(decoder)) == ["cross_key_0", "cross_value_0"]
    assert_projected_once(decoder)
    assert report["ignored"] == 0.0, report["ignored"]
    assert report["refused"].startswith("TypeError") and "quantize" in report["refused"] \
        and "text2text-generation" in report["refused"], report["refused"]
