"""A transformers causal LM built from a published quantized checkpoint.

`from_checkpoint(path)` reads the checkpoint (quantization/checkpoints/), builds
the model on the meta device (no float weights are ever made), puts a
`PackedLinear` holding each quantized Linear's PackedWeight in that Linear's
place, and assigns the float tensors (embeddings, norms, an unquantized
lm_head) as they were read. Buffers the model computes for itself (RoPE's
inv_freq) are made again on the CPU.

`quantize_float="int8_weight_only"` stores what the checkpoint left float
(its token embedding, an unquantized lm_head) in int8 (per row), the float
tensors dropped as soon as they are quantized; the checkpoint's own packed
layers are never quantized again. The model's quantization plan and the
Checkpoint's notes name the layers quantized here.
"""
from __future__ import annotations

import os

import torch

from ..errors import CheckpointError
from ..quantization.checkpoints import Checkpoint, read_checkpoint
from ..quantization.packed_linear import PackedLinear

CONFIG_KEYS_DROPPED = ("quantization_config", "torch_dtype", "dtype", "transformers_version")
# The schemes for a checkpoint's float layers: weight-only with an embedding form,
# per channel (a vocabulary-sized head needs no group size to divide anything).
FLOAT_LAYER_SCHEMES = ("int8_weight_only",)


def from_checkpoint(path: str | os.PathLike, *, unsupported: str = "refuse",
                    dtype: torch.dtype | None = None, quantize_float: str | None = None
                    ) -> tuple[torch.nn.Module, Checkpoint]:
    """(model in eval mode, the Checkpoint it came from). `dtype` is the float
    tensors' dtype (default: the checkpoint's embedding dtype); `unsupported`
    is GGUF's choice for kinds TensorRT cannot run ("refuse" or "requantize");
    `quantize_float`: None or "int8_weight_only", the float embedding and
    Linears the checkpoint left unquantized stored in int8 (module docstring)."""
    import transformers

    if quantize_float is not None and quantize_float not in FLOAT_LAYER_SCHEMES:
        raise CheckpointError(
            f"quantize_float={quantize_float!r}: a checkpoint's float layers (embedding, "
            f"unquantized lm_head) are quantized {' or '.join(FLOAT_LAYER_SCHEMES)} only "
            "(weight-only, per row); its packed layers keep the checkpoint's own quantization")
    ckpt = read_checkpoint(path, unsupported=unsupported)
    config = {k: v for k, v in ckpt.config.items() if k not in CONFIG_KEYS_DROPPED}
    model_type = config.pop("model_type", None)
    if model_type is None:
        raise CheckpointError(f"{path}: its config has no model_type; a transformers "
                              "config.json names one (e.g. 'llama')")
    try:
        hf_config = transformers.AutoConfig.for_model(model_type, **config)
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: transformers cannot build a {model_type!r} config "
                              f"from it ({e})") from None
    hf_config.use_cache = True
    embed = next((t for k, t in ckpt.tensors.items() if k.endswith("embed_tokens.weight")), None)
    dtype = dtype or (embed.dtype if embed is not None and embed.is_floating_point()
                      else torch.float32)
    del embed  # the table itself may be quantized and dropped below
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    _place_packed(model, ckpt, path)
    _assign_floats(model, ckpt, dtype, path)
    _remake_computed_buffers(model, path)
    if quantize_float is not None:
        model = _quantize_float_layers(model, ckpt, quantize_float, path)
    return model.eval(), ckpt


def _quantize_float_layers(model: torch.nn.Module, ckpt: Checkpoint, scheme: str, path):
    """`model` (its own modules replaced) with its float Linears and embeddings
    quantized by `scheme`, one at a time, each float tensor dropped from `ckpt`
    as soon as its layer is quantized: never all the tables twice in memory."""
    from ..quantization.embedding import quantized_embedding
    from ..quantization.registry import QuantizationPlan, format_of, with_plan

    floats = [n for n, m in model.named_modules()
              if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))]
    if not floats:
        raise CheckpointError(f"{path}: quantize_float={scheme!r}, but the checkpoint left no "
                              "embedding or Linear float: export it without quantize_float")
    fmt = format_of(scheme)
    layers: dict[str, str] = {}
    for name in floats:  # names: a list of the modules would keep every float table
        module = model.get_submodule(name)
        if isinstance(module, torch.nn.Linear):
            quantized, layers[name] = fmt.steps().quantize_linear(module, name, 0)
        else:
            quantized, layers[name] = quantized_embedding(module, scheme, 0, name)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, quantized)
        ckpt.tensors.pop(f"{name}.weight", None)
        del module, quantized
    ckpt.notes.append(f"quantized here {scheme} (the checkpoint stores them float): "
                      f"{', '.join(layers)}")
    return with_plan(model, QuantizationPlan(scheme, layers, runs_float=fmt.runs_float))


def _place_packed(model: torch.nn.Module, ckpt: Checkpoint, path) -> None:
    for name, packed in ckpt.packed.items():
        try:
            linear = model.get_submodule(name)
        except AttributeError:
            raise CheckpointError(f"{path}: quantized layer {name!r} is not a module of the "
                                  f"{type(model).__name__} its config builds") from None
        if not isinstance(linear, torch.nn.Linear) or (
                linear.in_features, linear.out_features) != (packed.in_features,
                                                             packed.out_features):
            raise CheckpointError(
                f"{path}: quantized layer {name!r} is {packed.out_features}x"
                f"{packed.in_features}; the model's is {type(linear).__name__} "
                f"{getattr(linear, 'out_features', '?')}x{getattr(linear, 'in_features', '?')}"
                ": the checkpoint does not match its config")
        if linear.bias is not None and packed.bias is None:
            raise CheckpointError(f"{path}: quantized layer {name!r} has no bias; the model's "
                                  "Linear has one: the checkpoint does not match its config")
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, PackedLinear(packed))


def _assign_floats(model: torch.nn.Module, ckpt: Checkpoint, dtype, path) -> None:
    tensors = {k: (t.to(dtype) if t.is_floating_point() else t) for k, t in ckpt.tensors.items()}
    expected = model.state_dict(keep_vars=True)
    for key, t in tensors.items():
        if key not in expected:
            raise CheckpointError(f"{path}: tensor {key!r} is not in the "
                                  f"{type(model).__name__} its config builds")
        if tuple(expected[key].shape) != tuple(t.shape):
            raise CheckpointError(f"{path}: tensor {key!r} is {list(t.shape)}; the model's is "
                                  f"{list(expected[key].shape)}")
    model.load_state_dict(tensors, strict=False, assign=True)
    if getattr(model.config, "tie_word_embeddings", False):
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
        if isinstance(out, torch.nn.Linear):
            out.weight = inp.weight
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    if missing:
        raise CheckpointError(f"{path}: has no tensor for {len(missing)} of the model's "
                              f"weights ({', '.join(missing[:4])}...); the checkpoint is "
                              "incomplete or of another architecture than its config names")


def _remake_computed_buffers(model: torch.nn.Module, path) -> None:
    for name, module in list(model.named_modules()):
        meta = [b for b, v in module.named_buffers(recurse=False) if v.is_meta]
        if not meta:
            continue
        if meta == ["embed_scale"] and hasattr(module, "scalar_embed_scale"):
            # transformers' scaled word embeddings (Gemma) keep the scale as a plain number too
            module.embed_scale = torch.tensor(module.scalar_embed_scale,
                                              dtype=module.weight.dtype)
            continue
        try:
            fresh = type(module)(config=model.config)
        except TypeError:
            raise CheckpointError(f"{path}: {name}'s buffers {meta} are computed at build time "
                                  f"and {type(module).__name__} cannot be rebuilt from the "
                                  "config alone") from None
        for b in meta:
            setattr(module, b, getattr(fresh, b))
