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

`task="image-text-to-text"` hands the recipe optimum's
`MultiModalTextToTextExportableModule` instead: it goes through
`llm.export_multimodal` (methods `vision_encoder`, `token_embedding`,
`text_decoder`) with the same limits, and optimum's single `get_eos_id` is
kept, which its `ExecuTorchModelForMultiModalToText` reads.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from ..aot.export_files import companions_of
from ..output_files import Staging, write_whole
from ..quantization.importers.torchao import has_torchao_weights
from .exporter import QUANTIZE, LLMExportResult, export

RECIPE = "tensorrt"
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
# recipe_kwargs the recipe takes (main_export(..., recipe_kwargs={...})).
OPTIONS = ("max_seq_len", "quantize", "group_size", "external_weights", "precision",
           "compute_capabilities", "progress", "image_size")


class WrittenProgram:
    """What the recipe returns for optimum to write: the program `llm.export`
    already wrote (and ran) in a private folder, published where optimum asks.
    `result` is llm.export's LLMExportResult (metadata, partition reports).

    optimum opens `<output_dir>/model.pte` for writing and then calls
    `write_to_file(f)` and `write_tensor_data_to_file(output_dir)`. The whole
    set (.ptd, report, program last) is published in `write_to_file`, staged
    beside the file optimum opened and renamed over it, so what lands is whole
    (output_files.py). An export that fails never reaches optimum's open.
    """

    def __init__(self, result: LLMExportResult, folder: Path):
        self.result = result
        self._folder = folder
        self._published = False

    def _companions(self) -> list[Path]:
        report = self.result.export.report_path
        return [*self.result.data_paths, *([report] if report else [])]

    def write_to_file(self, f) -> None:
        name = getattr(f, "name", None)
        if not isinstance(name, str) or not Path(name).parent.is_dir():
            with open(self.result.path, "rb") as src:  # not a file on disk: stream into it
                shutil.copyfileobj(src, f)
            return
        target = Path(name)
        files = [*self._companions(), self.result.path]
        with Staging(target.parent, target) as staging:
            for path in files:
                dest = target if path == self.result.path else target.parent / path.name
                with open(path, "rb") as src:
                    staging.write(dest, lambda out, src=src: shutil.copyfileobj(src, out))
            staging.publish([*(target.parent / p.name for p in self._companions()), target],
                            remove=companions_of(target))
        self._published = True

    def write_tensor_data_to_file(self, output_dir) -> None:
        """The .ptd (external weights) and the partition report, when
        write_to_file could not publish them with the program; then the
        private folder goes (optimum calls this last)."""
        try:
            if not self._published:
                for path in self._companions():
                    with open(path, "rb") as src:
                        write_whole(Path(output_dir) / path.name,
                                    lambda out, src=src: shutil.copyfileobj(src, out))
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)


def _llm_module(model):
    from optimum.exporters.executorch.integrations import (
        CausalLMExportableModule, MultiModalTextToTextExportableModule)

    if isinstance(model, MultiModalTextToTextExportableModule) and model.modality != "vision":
        raise ValueError(f"the {RECIPE!r} recipe exports image-text-to-text models; optimum "
                         f"gave a {model.modality} model")
    if not isinstance(model, (CausalLMExportableModule, MultiModalTextToTextExportableModule)):
        raise ValueError(
            f"the {RECIPE!r} recipe exports text-generation models (a causal LM) and "
            f"image-text-to-text models (optimum gave a {type(model).__name__}). For other "
            "models export the transformers module with executorch_tensorrt.export(), or use "
            "another recipe")
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
    module = _llm_module(model)
    metadata = dict(module.metadata)
    context = int(metadata["get_max_seq_len"])
    dtype = DTYPE_NAMES.get(module.model.dtype)
    if dtype is None:
        raise ValueError(f"the model's dtype {module.model.dtype} is not one the "
                         f"{RECIPE!r} recipe exports ({', '.join(DTYPE_NAMES.values())})")
    eos = metadata.pop("get_eos_id", None)  # optimum's single id; ours is the list
    folder = Path(tempfile.mkdtemp(prefix="etrt-optimum-"))
    common = dict(max_seq_len=int(kwargs.pop("max_seq_len", context)), max_context_len=context,
                  dtype=dtype, output=folder / "model.pte", bos_id=metadata.get("get_bos_id"),
                  eos_ids=eos, constant_methods=metadata)
    try:
        if hasattr(module, "modality"):  # optimum's image-text-to-text module
            from .multimodal import export_multimodal

            if eos is not None:  # ExecuTorchModelForMultiModalToText reads optimum's single id
                common["constant_methods"] = {**metadata, "get_eos_id": eos}
            result = export_multimodal(module.model, **common, **kwargs)
        else:
            if "image_size" in kwargs:
                raise TypeError("recipe_kwargs image_size is for image-text-to-text models")
            result = export(module.model, **common, **kwargs)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return {"model": WrittenProgram(result, folder)}


def register(registry) -> None:
    """Puts the recipe into optimum-executorch's registry module."""
    registry.register_recipe(RECIPE)(export_with_tensorrt)
