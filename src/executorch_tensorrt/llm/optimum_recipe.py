"""optimum-executorch's `tensorrt` recipe: `main_export(model_id_or_folder,
task="text-generation", recipe="tensorrt", output_dir=...)` exports a causal
LM with `llm.export` (TensorRT owns the KV caches, the run check runs the
written program) and writes `model.pte` (+ `model.ptd`) where optimum writes
its other recipes' programs. optimum_hook.py registers it on import.

What optimum hands a recipe is its `CausalLMExportableModule`: the loaded
transformers model (`.model`, eager attention or sdpa, static cache) and the
constant methods it would write (`.metadata`). optimum's `get_max_seq_len` is
the cache length (its programs take up to that many tokens per call), so it
becomes our `max_context_len`; the tokens per call default to the same and
can be lowered with `recipe_kwargs={"max_seq_len": N}`. optimum's other
constant methods (`get_n_layers`, `get_head_dim`, `get_dtype`, ...) are
written too; ours win where both name one.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from ..quantization.importers.torchao import has_torchao_weights
from .exporter import QUANTIZE, LLMExportResult, export

RECIPE = "tensorrt"
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
# recipe_kwargs the recipe takes (main_export(..., recipe_kwargs={...})).
OPTIONS = ("max_seq_len", "quantize", "group_size", "external_weights", "precision",
           "compute_capabilities", "progress")


class WrittenProgram:
    """What the recipe returns for optimum to write: the program `llm.export`
    already wrote (and ran) in a private folder, copied where optimum asks.
    `result` is llm.export's LLMExportResult (metadata, partition reports)."""

    def __init__(self, result: LLMExportResult, folder: Path):
        self.result = result
        self._folder = folder

    def write_to_file(self, f) -> None:
        with open(self.result.path, "rb") as src:
            shutil.copyfileobj(src, f)

    def write_tensor_data_to_file(self, output_dir) -> None:
        """The .ptd (external weights) and the partition report; optimum calls
        this after write_to_file, so the private folder goes afterwards."""
        report = self.result.export.report_path
        for path in [*self.result.data_paths, *([report] if report else [])]:
            shutil.copy2(path, Path(output_dir) / path.name)
        shutil.rmtree(self._folder, ignore_errors=True)


def _causal_lm_module(model):
    from optimum.exporters.executorch.integrations import CausalLMExportableModule

    if not isinstance(model, CausalLMExportableModule):
        raise ValueError(
            f"the {RECIPE!r} recipe exports text-generation models (a causal LM; optimum "
            f"gave a {type(model).__name__}). For other models export the transformers "
            "module with executorch_tensorrt.export(), or use another recipe")
    if model.use_custom_sdpa or model.use_custom_kv_cache:
        raise ValueError(
            f"the {RECIPE!r} recipe exports transformers' own attention and static cache, "
            "which TensorRT takes and owns; custom_sdpa and the custom KV cache are "
            "ExecuTorch's CPU kernels. Leave out use_custom_sdpa / use_custom_kv_cache / "
            "attn_implementation='custom_sdpa'")
    if has_torchao_weights(model.model):
        raise ValueError(
            f"the model was quantized by optimum (qlinear / qembedding); the {RECIPE!r} "
            "recipe quantizes itself so that TensorRT gets its Q/DQ form: leave those out and "
            f"pass recipe_kwargs={{'quantize': one of {QUANTIZE}}}")
    return model


def export_with_tensorrt(model, **kwargs) -> dict[str, WrittenProgram]:
    """The recipe optimum calls with its exportable module and recipe_kwargs."""
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise TypeError(f"the {RECIPE!r} recipe takes recipe_kwargs {', '.join(OPTIONS)}; "
                        f"got {', '.join(unknown)}")
    module = _causal_lm_module(model)
    metadata = dict(module.metadata)
    context = int(metadata["get_max_seq_len"])
    dtype = DTYPE_NAMES.get(module.model.dtype)
    if dtype is None:
        raise ValueError(f"the model's dtype {module.model.dtype} is not one the "
                         f"{RECIPE!r} recipe exports ({', '.join(DTYPE_NAMES.values())})")
    eos = metadata.pop("get_eos_id", None)  # optimum's single id; ours is the list
    folder = Path(tempfile.mkdtemp(prefix="etrt-optimum-"))
    try:
        result = export(module.model, max_seq_len=int(kwargs.pop("max_seq_len", context)),
                        max_context_len=context, dtype=dtype, output=folder / "model.pte",
                        bos_id=metadata.get("get_bos_id"), eos_ids=eos,
                        constant_methods=metadata, **kwargs)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return {"model": WrittenProgram(result, folder)}


def register(registry) -> None:
    """Puts the recipe into optimum-executorch's registry module."""
    registry.register_recipe(RECIPE)(export_with_tensorrt)
