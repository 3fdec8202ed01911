"""optimum-executorch's `tensorrt` recipe: `main_export(model_id_or_folder,
task=..., recipe="tensorrt", output_dir=...)` writes `model.pte` (+ `model.ptd`
with external weights) where optimum writes its other recipes' programs, and
optimum's own `ExecuTorchModelFor*` class runs it. optimum_hook.py registers
it on import.

optimum hands a recipe the exportable module its task loader made; TASKS maps
that module's class to the task's exporter and the recipe_kwargs it takes.
`text-generation` (CausalLMExportableModule) goes through `llm.export`
(TensorRT owns the KV caches); fill-mask, image-classification and
text2text-generation through optimum_tasks.py; automatic-speech-recognition
(Whisper) through llm/speech.py as the `encoder` and `text_decoder` methods
`ExecuTorchModelForSpeechSeq2Seq` runs, optimum's `max_seq_len` (default 1024)
being the decoder cache, capped at the model's `max_target_positions`;
image-text-to-text (MultiModalTextToTextExportableModule, vision modality)
through `llm.export_multimodal` (methods `vision_encoder`, `token_embedding`,
`text_decoder`) with the same limits as text-generation, optimum's single
`get_eos_id` kept (its `ExecuTorchModelForMultiModalToText` reads it);
multimodal-text-to-text of Voxtral (the same module, audio modality) likewise
through `llm.audio.export_audio_llm` (methods `audio_encoder`, taking as many
chunks of features as one decoder call holds, `token_embedding`,
`text_decoder`).

For text-generation and image-text-to-text, optimum's `get_max_seq_len` is the cache length (its
programs take up to that many tokens per call), so it becomes our
`max_context_len`; the tokens per call default to the same and can be lowered
with `recipe_kwargs={"max_seq_len": N}`. optimum's other constant methods
(`get_n_layers`, `get_head_dim`, `get_dtype`, ...) are written too; ours win
where both name one.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..aot.export_files import companions_of
from ..output_files import Staging, write_whole
from ..quantization.importers.torchao import has_torchao_weights
from . import optimum_tasks
from .exporter import QUANTIZE, export

RECIPE = "tensorrt"
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
# recipe_kwargs text-generation takes (main_export(..., recipe_kwargs={...})).
OPTIONS = ("max_seq_len", "quantize", "group_size", "external_weights", "precision",
           "compute_capabilities", "progress")
SPEECH_OPTIONS = ("precision", "compute_capabilities", "progress")
MULTIMODAL_OPTIONS = (*OPTIONS, "image_size")
AUDIO_LLM_OPTIONS = ("max_seq_len", "external_weights", "precision", "compute_capabilities",
                     "progress")


class WrittenProgram:
    """What the recipe returns for optimum to write: the program `llm.export`
    already wrote (and ran) in a private folder, published where optimum asks.
    `result` is the exporter's result: llm.export's LLMExportResult or
    optimum_tasks.TaskExportResult (`.path`, `.data_paths`, `.export` with the
    partition reports).

    optimum opens `<output_dir>/model.pte` for writing and then calls
    `write_to_file(f)` and `write_tensor_data_to_file(output_dir)`. The whole
    set (.ptd, report, program last) is published in `write_to_file`, staged
    beside the file optimum opened and renamed over it, so what lands is whole
    (output_files.py). An export that fails never reaches optimum's open.
    """

    def __init__(self, result, folder: Path):
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


def _causal_lm_module(model):
    if model.use_custom_sdpa or model.use_custom_kv_cache:
        raise ValueError(
            f"the {RECIPE!r} recipe exports transformers' own attention and static cache, "
            "which TensorRT takes and owns; custom_sdpa and the custom KV cache are "
            "ExecuTorch's CPU kernels. Leave out use_custom_sdpa / use_custom_kv_cache / "
            "attn_implementation='custom_sdpa'")
    return model


def _llm_limits(module, output: Path, kwargs: dict) -> dict:
    """llm.export's and export_multimodal's arguments from optimum's module."""
    module = _causal_lm_module(module)
    metadata = dict(module.metadata)
    context = int(metadata["get_max_seq_len"])
    dtype = DTYPE_NAMES.get(module.model.dtype)
    if dtype is None:
        raise ValueError(f"the model's dtype {module.model.dtype} is not one the "
                         f"{RECIPE!r} recipe exports ({', '.join(DTYPE_NAMES.values())})")
    eos = metadata.pop("get_eos_id", None)  # optimum's single id; ours is the list
    return dict(max_seq_len=int(kwargs.pop("max_seq_len", context)), max_context_len=context,
                dtype=dtype, output=output, bos_id=metadata.get("get_bos_id"), eos_ids=eos,
                constant_methods=metadata)


def _export_causal_lm(module, output: Path, **kwargs):
    return export(module.model, **_llm_limits(module, output, kwargs), **kwargs)


def _multimodal_limits(module, output: Path, kwargs: dict) -> dict:
    common = _llm_limits(module, output, kwargs)
    if common["eos_ids"] is not None:  # ExecuTorchModelForMultiModalToText reads optimum's id
        common["constant_methods"] = {**common["constant_methods"],
                                      "get_eos_id": common["eos_ids"]}
    return common


def _export_multimodal(module, output: Path, **kwargs):
    from .multimodal import export_multimodal, processor_record

    if module.modality != "vision":
        raise ValueError(
            f"the {RECIPE!r} recipe exports multimodal models of the vision modality and "
            f"Voxtral (audio); optimum gave a {module.modality} model of type "
            f"{module.model.config.model_type!r}. Use another recipe for it")
    common = _multimodal_limits(module, output, kwargs)
    # optimum copies preprocessor_config.json's keys as they are (a dict's keys
    # are lost on reading); the typed record is what generate reads.
    common["constant_methods"] = {
        **common["constant_methods"],
        **processor_record(getattr(module, "processor_config", None)).constant_methods}
    return export_multimodal(module.model, **common, **kwargs)


def _export_audio_llm(module, output: Path, **kwargs):
    """multimodal-text-to-text of Voxtral: llm/audio.py's `audio_encoder`
    (log-mel features [chunks, n_mels, frames], as many chunks as one
    text_decoder call holds: optimum's class prefills the whole prompt at
    once), `token_embedding` and `text_decoder`, with optimum's `modality`
    and `audio_token_id`."""
    from .audio import audio_spec, export_audio_llm

    common = _multimodal_limits(module, output, kwargs)
    tokens = audio_spec(module.model).tokens
    # The model folder's preprocessor_config.json, as optimum read it: its
    # log-mel parameters let `generate` take a .wav.
    return export_audio_llm(module.model, **common,
                            max_audio_chunks=max(1, common["max_seq_len"] // tokens),
                            feature_extractor=module.processor_config, **kwargs)


def _export_speech(module, output: Path, **kwargs):
    from .speech import export_whisper

    model = module.model
    cache = min(int(module.max_seq_len), int(model.config.max_target_positions))
    # get_max_seq_len is what optimum's class generates up to: the cache we made.
    return export_whisper(model, max_cache_len=cache, output=output,
                          constant_methods={**module.metadata, "get_max_seq_len": cache},
                          **kwargs)


@dataclass(frozen=True)
class TaskExporter:
    task: str
    module: str  # optimum's exportable-module class the task loader returns
    export: Callable  # (that module, output .pte path, **recipe_kwargs) -> result
    options: tuple[str, ...]  # the recipe_kwargs it takes
    # transformers model types it takes (empty: any); optimum's speech and text
    # seq2seq loaders return the same module class, with different models.
    model_types: tuple[str, ...] = ()


# The recipe's tasks: a new one is an entry here and its exporter.
TASKS = (
    TaskExporter("text-generation", "CausalLMExportableModule", _export_causal_lm, OPTIONS),
    TaskExporter("fill-mask", "MaskedLMExportableModule", optimum_tasks.export_masked_lm,
                 optimum_tasks.TASK_OPTIONS),
    TaskExporter("image-classification", "VisionEncoderExportableModule",
                 optimum_tasks.export_image_classifier, optimum_tasks.TASK_OPTIONS),
    TaskExporter("text2text-generation", "Seq2SeqLMExportableModule",
                 optimum_tasks.export_seq2seq_lm, optimum_tasks.SEQ2SEQ_OPTIONS, ("t5",)),
    TaskExporter("automatic-speech-recognition", "Seq2SeqLMExportableModule", _export_speech,
                 SPEECH_OPTIONS, ("whisper",)),
    # optimum's multimodal-text-to-text and image-text-to-text load the same
    # module; the audio model it holds picks the audio export.
    TaskExporter("multimodal-text-to-text", "MultiModalTextToTextExportableModule",
                 _export_audio_llm, AUDIO_LLM_OPTIONS, ("voxtral",)),
    TaskExporter("image-text-to-text", "MultiModalTextToTextExportableModule",
                 _export_multimodal, MULTIMODAL_OPTIONS),
)


def _exporter_of(model) -> TaskExporter:
    classes = {cls.__name__ for cls in type(model).__mro__}
    model_type = getattr(getattr(getattr(model, "model", None), "config", None),
                         "model_type", None)
    same_module = [t for t in TASKS if t.module in classes]
    for exporter in same_module:
        if not exporter.model_types or model_type in exporter.model_types:
            return exporter
    if same_module:
        takes = "; ".join(f"{t.task} of {', '.join(t.model_types)}" for t in same_module)
        raise ValueError(
            f"the {RECIPE!r} recipe exports {takes} models from optimum's "
            f"{type(model).__name__}; this one holds a {model_type!r} model. Use another "
            "recipe for it")
    tasks = ", ".join(f"{t.task} ({t.module})" for t in TASKS)
    raise ValueError(
        f"the {RECIPE!r} recipe exports {tasks}; optimum gave a {type(model).__name__}. "
        "For other models export the transformers module with executorch_tensorrt.export(), "
        "or use another recipe")


def export_with_tensorrt(model, **kwargs) -> dict[str, WrittenProgram]:
    """The recipe optimum calls with its exportable module and recipe_kwargs."""
    known = dict.fromkeys(o for t in TASKS for o in t.options)
    unknown = sorted(set(kwargs) - set(known))
    if unknown:  # refused before the module is looked at: a typo is named first
        raise TypeError(f"the {RECIPE!r} recipe takes recipe_kwargs {', '.join(known)}; "
                        f"got {', '.join(unknown)}")
    exporter = _exporter_of(model)
    unknown = sorted(set(kwargs) - set(exporter.options))
    if unknown:
        raise TypeError(f"the {RECIPE!r} recipe's {exporter.task} takes recipe_kwargs "
                        f"{', '.join(exporter.options)}; {', '.join(unknown)} do not apply")
    if has_torchao_weights(model.model):
        raise ValueError(
            f"the model was quantized by optimum (qlinear / qembedding); the {RECIPE!r} "
            "recipe quantizes itself so that TensorRT gets its Q/DQ form: leave those out and "
            f"pass recipe_kwargs={{'quantize': one of {QUANTIZE}}}")
    folder = Path(tempfile.mkdtemp(prefix="etrt-optimum-"))
    try:
        result = exporter.export(model, folder / "model.pte", **kwargs)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return {"model": WrittenProgram(result, folder)}


def register(registry) -> None:
    """Puts the recipe into optimum-executorch's registry module."""
    registry.register_recipe(RECIPE)(export_with_tensorrt)
