"""Readers for quantized LLM checkpoints as they are published: GPTQ and AWQ
(gptq_awq.py), compressed-tensors pack-quantized (compressed_tensors.py), both
safetensors with a transformers config.json, and GGUF (gguf.py). Each returns
a `Checkpoint`: a `PackedWeight` per quantized Linear, the float tensors, and
the transformers config. Every reader checks sizes, offsets, dtypes and shapes
before reading and refuses with a CheckpointError (docs/checkpoints.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ...errors import CheckpointError
from .common import Checkpoint

__all__ = ["Checkpoint", "CheckpointError", "is_published_checkpoint", "read_checkpoint"]

METHODS = ("gptq", "awq", "compressed-tensors")
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_checkpoint(path: str | os.PathLike, *, unsupported: str = "refuse") -> Checkpoint:
    """Reads a checkpoint folder (config.json + safetensors) or a .gguf file.
    `unsupported` (GGUF only): "refuse" or "requantize" kinds TensorRT cannot run."""
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf" or path.is_file() and _is_gguf(path):
        from .gguf import read_gguf

        return read_gguf(path, unsupported=unsupported)
    if not path.is_dir():
        raise CheckpointError(f"{path}: is neither a checkpoint folder (config.json and "
                              ".safetensors files) nor a .gguf file; give one of those")
    config = read_config(path / "config.json")
    if "quantization_config" not in config:
        config = _with_legacy_quantization_config(path, config)
    qc = config.get("quantization_config")
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    if method not in METHODS:
        raise CheckpointError(f"{path / 'config.json'}: quantization_config.quant_method is "
                              f"{method!r}; expected one of {list(METHODS)}. Load an "
                              "unquantized model with transformers, or quantize it with "
                              "executorch_tensorrt.quantization.quantize")
    from .safetensors_reader import SafetensorsFolder

    files = SafetensorsFolder(path)
    try:
        if method == "compressed-tensors":
            from .compressed_tensors import read_compressed_tensors

            return read_compressed_tensors(files, config, str(path))
        from .gptq_awq import read_gptq_awq

        return read_gptq_awq(files, config, str(path))
    finally:
        files.close()


def is_published_checkpoint(path: str | os.PathLike) -> bool:
    """A .gguf file, or a folder whose config names a quantization method (in
    config.json or an older AutoGPTQ / AutoAWQ file beside it): what
    read_checkpoint reads rather than transformers' own loader."""
    path = Path(path)
    if path.is_file():
        return _is_gguf(path)
    if not (path / "config.json").is_file():
        return False
    try:
        config = read_config(path / "config.json")
    except CheckpointError:
        return False
    return ("quantization_config" in config
            or any((path / name).is_file() for name, _ in LEGACY_CONFIGS))


def read_config(path: Path) -> dict:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise CheckpointError(f"{path}: is {path.stat().st_size} bytes; a config.json is "
                                  f"at most {MAX_CONFIG_BYTES}")
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror}); a checkpoint folder "
                              "holds the model's transformers config.json") from e
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CheckpointError(f"{path}: is not JSON; download the config again") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: holds a {type(config).__name__}; expected a JSON object")
    return config


# Older AutoGPTQ / AutoAWQ releases wrote the quantization settings beside config.json.
LEGACY_CONFIGS = (("quantize_config.json", "gptq"), ("quant_config.json", "awq"))


def _with_legacy_quantization_config(path: Path, config: dict) -> dict:
    for name, method in LEGACY_CONFIGS:
        if (path / name).is_file():
            legacy = read_config(path / name)
            return {**config, "quantization_config": {"quant_method": method, **legacy}}
    return config


def _is_gguf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"
