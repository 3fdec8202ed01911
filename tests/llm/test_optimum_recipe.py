"""optimum-executorch's `main_export(..., recipe="tensorrt")` after
`import executorch_tensorrt`: the program it writes runs in ExecuTorch's own
TextLLMRunner with eager greedy's tokens (prompt prefilled in chunks, weights
in a .ptd), carries optimum's constant methods beside the runner's, and the
recipe's refusals name the cause. optimum-executorch lives in
build/optimum-site (tools/setup.sh, pins.toml [optimum]), so the exports run
in child interpreters with it on their path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

from executorch_tensorrt import llm
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from runner_helpers import CONFIGS, encode, runner_tokens, write_char_tokenizer

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "build" / "optimum-site"
CONTEXT, PER_CALL, NEW = 48, 4, 10
PROMPT = "optimum+TRT"  # 11 tokens: prefilled in chunks of 4


def _child(script: str, *args: str, timeout: int = 600,
           env: dict | None = None) -> subprocess.CompletedProcess:
    if not (SITE / "optimum" / "exporters" / "executorch").is_dir():
        pytest.fail(f"{SITE} has no optimum-executorch: run tools/setup.sh")
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(SITE), str(REPO)])}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


EXPORT = """
import json, sys
import executorch_tensorrt
assert "optimum" not in sys.modules, "import executorch_tensorrt imported optimum"
from optimum.exporters.executorch import main_export
from optimum.exporters.executorch.recipe_registry import recipe_registry
model_dir, out = sys.argv[1:3]
progs = main_export(model_dir, task="text-generation", recipe="tensorrt", output_dir=out,
                    local_files_only=True, max_seq_len=%d,
                    recipe_kwargs={"max_seq_len": %d, "external_weights": True,
                                   "progress": None})
import hashlib, os
def snapshot():
    return {n: hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(out))}
published = snapshot()
errors = {}
for name, call in {
        "unknown option over the program": lambda: main_export(
            model_dir, task="text-generation", recipe="tensorrt", output_dir=out,
            local_files_only=True, max_seq_len=16, recipe_kwargs={"workspace": 1}),
        "unknown option": lambda: recipe_registry["tensorrt"](None, workspace=1),
        "custom sdpa": lambda: main_export(model_dir, task="text-generation",
                                           recipe="tensorrt", output_dir=out + "-sdpa",
                                           local_files_only=True, max_seq_len=16,
                                           use_custom_sdpa=True)}.items():
    try:
        call()
        errors[name] = None
    except Exception as e:
        errors[name] = f"{type(e).__name__}: {e}"
print(json.dumps({"written": sorted(progs), "errors": errors, "published": published,
                  "after_failure": snapshot()}))
""" % (CONTEXT, PER_CALL)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("optimum")
    config = dict(CONFIGS["llama"])
    config.pop("model_type")
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    model.save_pretrained(folder / "model")
    done = _child(EXPORT, str(folder / "model"), str(folder / "out"))
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return folder / "out", model, report, write_char_tokenizer(folder)


def test_main_export_writes_a_program_the_runner_decodes_as_eager(exported, allow_fallback):
    from executorch.extension.llm.runner import TextLLMRunner

    out, model, report, tokenizer = exported
    assert report["written"] == ["model"]
    pte, ptd = out / "model.pte", out / "model.ptd"
    assert pte.is_file() and ptd.is_file() and (out / "model.report.json").is_file()
    assert ptd.stat().st_size > sum(p.numel() * 4 for p in model.parameters()) * 0.9
    got = runner_tokens(TextLLMRunner(str(pte), str(tokenizer), str(ptd)), PROMPT, NEW)
    want = greedy_decode(llm.eager_decoder(model, CONTEXT), encode(PROMPT), NEW).tokens
    assert got and got == want[:len(got)], (got, want)


def test_program_carries_optimums_and_the_runners_constant_methods(exported, allow_fallback):
    from executorch.runtime import Runtime

    out, model, _, _ = exported
    program = Runtime.get().load_program(str(out / "model.pte"),
                                         data_path=str(out / "model.ptd"))

    def value(name):
        (v,) = program.load_method(name).execute([])
        return int(v)

    # optimum's get_max_seq_len (the cache) became our context; tokens per call ours.
    assert value("get_max_context_len") == CONTEXT and value("get_max_seq_len") == PER_CALL
    assert value("get_n_layers") == model.config.num_hidden_layers  # optimum's own
    eos = program.load_method("get_eos_ids").execute([])
    assert [int(v) for v in eos] == [model.config.eos_token_id]


def test_recipe_refusals_name_the_cause(exported):
    errors = exported[2]["errors"]
    assert errors["unknown option"].startswith("TypeError") and "workspace" in \
        errors["unknown option"] and "max_seq_len" in errors["unknown option"]
    assert errors["custom sdpa"].startswith("ValueError") and "custom_sdpa" in \
        errors["custom sdpa"]


def test_the_set_is_published_whole_and_a_failed_export_leaves_it(exported):
    """The program, its .ptd and report land together with nothing of the
    staging left; a later main_export that fails leaves them byte for byte."""
    report = exported[2]
    assert set(report["published"]) == {"model.pte", "model.ptd", "model.report.json"}
    assert report["errors"]["unknown option over the program"].startswith("TypeError")
    assert report["after_failure"] == report["published"]


def test_recipe_registers_when_optimum_was_imported_first():
    done = _child("from optimum.exporters.executorch.recipe_registry import recipe_registry\n"
                  "assert 'tensorrt' not in recipe_registry\n"
                  "import executorch_tensorrt\n"
                  "print(recipe_registry['tensorrt'].__module__)", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["executorch_tensorrt.llm.optimum_recipe"]


MOE_EXPORT = """
import json, sys
import executorch_tensorrt
from optimum.exporters.executorch import main_export
model_dir, out = sys.argv[1:3]
progs = main_export(model_dir, task="text-generation", recipe="tensorrt", output_dir=out,
                    local_files_only=True, max_seq_len=%d,
                    recipe_kwargs={"max_seq_len": %d, "progress": None})
report = progs["model"].result.export.reports["forward"]
print(json.dumps({"rejected": sorted(report.rejected), "partitions": len(report.partitions)}))
""" % (CONTEXT, PER_CALL)


def test_a_moe_decoder_with_the_default_experts_code_goes_through_the_recipe(tmp_path,
                                                                              allow_fallback):
    """Mixtral with transformers' default experts code: optimum hands its module
    over, the recipe puts every node on TensorRT, and ExecuTorch's runner
    decodes eager's greedy tokens from the program optimum wrote."""
    from executorch.extension.llm.runner import TextLLMRunner
    from test_moe_export import MOE_CONFIGS

    config = dict(MOE_CONFIGS["mixtral"])
    config.pop("model_type")
    model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**config)).eval()
    model.save_pretrained(tmp_path / "model")
    done = _child(MOE_EXPORT, str(tmp_path / "model"), str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"rejected": [], "partitions": 1}, report
    tokenizer = write_char_tokenizer(tmp_path)
    got = runner_tokens(TextLLMRunner(str(tmp_path / "out" / "model.pte"), str(tokenizer)),
                        PROMPT, NEW)
    want = greedy_decode(llm.eager_decoder(model, CONTEXT), encode(PROMPT), NEW).tokens
    assert got and got == want[:len(got)], (got, want)
