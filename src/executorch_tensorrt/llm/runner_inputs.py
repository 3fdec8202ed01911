"""What `generate` checks before it hands a program to ExecuTorch's LLM
runners: the program's methods and limits (read through `executorch.runtime`:
constant methods and MethodMeta, no method run but the constants), the
tokenizer (loaded the way the runners load it, through pytorch_tokenizers, so
prompt tokens are counted as the runner will count them), and image and audio
files turned into the tensors the encoders take.

The runners report most bad inputs as "Generation failed", or abort the
process (a multimodal program missing `token_embedding`), so every refusal
here happens before a runner exists and names the input, the limit and the
remedy."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dtypes import by_scalar_type
from ..errors import ExecuTorchTensorRTError
from .audio_files import AudioFileError, AudioInput, read_wav, wav_features
from .image_files import PICTURE_SUFFIXES, Normalization, Picture, PictureError, read_picture
from .image_preprocessing import METHOD as PREPROCESSING_METHOD
from .image_preprocessing import ImagePreprocessing, PreprocessingConfigError
from .mel_features import MEL_METHODS, MelFeatureSpec
from .metadata import LLMMetadata, read_metadata

ENCODERS = {"image": "vision_encoder", "audio": "audio_encoder"}
MULTIMODAL_METHODS = ("token_embedding", "text_decoder")
LIMIT_METHODS = ("get_max_seq_len", "get_max_context_len", "get_vocab_size")
# The runners' float inputs: uint8 images, float32 images and features (the
# runner converts float32 to bfloat16 itself for a bfloat16 encoder).
_RUNNER_DTYPES = {"image": ("uint8", "float32"), "audio": ("float32",)}


class GenerateInputError(ExecuTorchTensorRTError, ValueError):
    """A program, tokenizer, prompt, image or audio that `generate` cannot use;
    the message names it, the limit and what to do."""


class GenerateRunError(ExecuTorchTensorRTError, RuntimeError):
    """The program could not be loaded or ExecuTorch's runner failed on it."""


@dataclass(frozen=True)
class TensorMeta:
    dtype: str
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.dtype} {list(self.shape)}"


@dataclass(frozen=True)
class ProgramInfo:
    """What `generate` needs to know of a program before running it."""

    path: Path
    data_path: Path | None
    methods: frozenset[str]
    limits: LLMMetadata
    encoders: dict[str, TensorMeta]        # "image"/"audio" -> the encoder's input 0
    media_tokens: dict[str, int]           # "image"/"audio" -> positions its output fills
    text_chunk: int | None                 # prompt tokens the methods take at once
    decoder_chunk: int | None              # embeddings text_decoder takes at once
    # the processor's image_mean / image_std, when the program records them
    # (optimum writes preprocessor_config.json's keys as constant methods)
    image_normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    sampling_rate: int | None = None       # the feature extractor's, when recorded so
    # the processor's resize, crop and rescale, when the program records them
    image_preprocessing: ImagePreprocessing | None = None
    mel: MelFeatureSpec | None = None      # its log-mel parameters, when recorded

    @property
    def multimodal(self) -> bool:
        return any(m in self.methods for m in (*MULTIMODAL_METHODS, *ENCODERS.values()))


def _meta(meta, index: int, output: bool = False) -> TensorMeta:
    t = meta.output_tensor_meta(index) if output else meta.input_tensor_meta(index)
    row = by_scalar_type(int(t.dtype()))
    return TensorMeta(row.numpy or row.torch if row else f"scalar_type {t.dtype()}",
                      tuple(int(s) for s in t.sizes()))


def read_program_info(path: str | Path, data_path: str | Path | None = None) -> ProgramInfo:
    """The methods, limits and encoder inputs of the program at `path` (with
    its weights file `data_path`); refuses a program the runners cannot take."""
    import executorch_tensorrt
    from executorch.runtime import Runtime

    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise GenerateInputError(f"program {path} {what}: give the .pte that llm.export (or "
                                 "llm-export) wrote")
    executorch_tensorrt.register()  # the runner loads TensorRTBackend's partitions
    extra = {"data_path": str(data_path)} if data_path is not None else {}
    try:
        program = Runtime.get().load_program(str(path), **extra)
    except Exception as e:  # noqa: BLE001 - ExecuTorch raises RuntimeError with a code
        raise GenerateRunError(f"ExecuTorch cannot load the program {path}"
                               f"{f' with the weights file {data_path}' if data_path else ''}: "
                               f"{e}. The file is damaged or not an ExecuTorch program: export "
                               "it again.") from None
    methods = frozenset(program.method_names)
    absent = [m for m in LIMIT_METHODS if m not in methods]
    if absent:
        raise GenerateInputError(
            f"program {path} has no method {', '.join(repr(m) for m in absent)}: the constant "
            "methods ExecuTorch's runners read their limits from (its methods: "
            f"{', '.join(sorted(methods))}). Export it with executorch_tensorrt.llm.export, or "
            "pass them as constant methods to to_edge_transform_and_lower.")
    limits = read_metadata(program)
    info = ProgramInfo(path, Path(data_path) if data_path else None, methods, limits,
                       {}, {}, None, None)
    if not info.multimodal:
        if "forward" not in methods and "prefill" not in methods:
            raise GenerateInputError(
                f"program {path} has no method 'forward', which TextLLMRunner calls with "
                f"(tokens, positions); its methods: {', '.join(sorted(methods))}. Export the "
                "decoder with executorch_tensorrt.llm.export.")
        return info
    missing = [m for m in MULTIMODAL_METHODS if m not in methods]
    if missing:
        present = sorted(m for m in methods if m in (*ENCODERS.values(), *MULTIMODAL_METHODS))
        raise GenerateInputError(
            f"program {path} has {', '.join(present)} but no method "
            f"{', '.join(repr(m) for m in missing)}, which MultimodalRunner needs "
            f"({', '.join(MULTIMODAL_METHODS)}); its methods: {', '.join(sorted(methods))}. "
            "Export the model's text decoder and token embedding into the same program.")
    encoders, media_tokens = {}, {}
    for kind, method in ENCODERS.items():
        if method in methods:
            meta = program.metadata(method)
            encoders[kind] = _meta(meta, 0)
            out = _meta(meta, 0, output=True).shape
            media_tokens[kind] = out[1] if len(out) >= 2 else 1
    chunk = _meta(program.metadata("token_embedding"), 0).shape
    decoder = _meta(program.metadata("text_decoder"), 0).shape
    # A text input goes to token_embedding and then to text_decoder whole: the
    # smaller of the two upper bounds is the longest prompt.
    decoder_chunk = decoder[1] if len(decoder) >= 2 else 1
    text_chunk = min(chunk[-1] if chunk else 1, decoder_chunk)
    return ProgramInfo(path, info.data_path, methods, limits, encoders, media_tokens,
                       text_chunk, decoder_chunk, _recorded_normalization(program, methods),
                       _recorded_int(program, methods, "sampling_rate"),
                       _recorded_preprocessing(program, methods, path),
                       _recorded_mel(program, methods))


def _recorded_mel(program, methods) -> MelFeatureSpec | None:
    if not all(m in methods for m in MEL_METHODS):
        return None
    return MelFeatureSpec.from_methods(lambda name: _recorded_int(program, methods, name))


def _recorded_int(program, methods, name: str) -> int | None:
    if name not in methods:
        return None
    (value,) = program.load_method(name).execute([])
    return int(value.item() if hasattr(value, "item") else value)


def _constant_values(program, name: str) -> list:
    """A list constant's values (one method output per value)."""
    out = []
    for value in program.load_method(name).execute([]):
        out += value.flatten().tolist() if hasattr(value, "flatten") else [value]
    return out


def _recorded_normalization(program, methods) -> tuple | None:
    if "image_mean" not in methods or "image_std" not in methods:
        return None
    return tuple(tuple(float(v) for v in _constant_values(program, name))
                 for name in ("image_mean", "image_std"))


def _recorded_preprocessing(program, methods, path: Path) -> ImagePreprocessing | None:
    if PREPROCESSING_METHOD not in methods:
        return None
    try:
        return ImagePreprocessing.from_constant(_constant_values(program, PREPROCESSING_METHOD))
    except PreprocessingConfigError as e:
        raise GenerateInputError(f"program {path}: {e}") from None


# ---- the tokenizer -----------------------------------------------------------

_TOKENIZER_KINDS = "a HuggingFace tokenizer.json, a tiktoken file, a SentencePiece .model " \
                   "or a llama2.c tokenizer.bin"


def load_tokenizer(path: str | Path):
    """The tokenizer at `path`, tried in the order ExecuTorch's runners try
    (Tekken for tekken.json, HF JSON, tiktoken, SentencePiece, llama2.c),
    through the same C++ library they use."""
    from pytorch_tokenizers import pytorch_tokenizers_cpp as cpp

    path = Path(path)
    if not path.is_file():
        raise GenerateInputError(f"tokenizer {path} does not exist: give {_TOKENIZER_KINDS}")
    kinds = [cpp.Tekken] if path.name.endswith("tekken.json") else []
    for kind in (*kinds, cpp.HFTokenizer, cpp.Tiktoken, cpp.SPTokenizer, cpp.Llama2cTokenizer):
        tokenizer = kind()
        try:
            tokenizer.load(str(path))
        except RuntimeError:
            continue
        if tokenizer.is_loaded() and tokenizer.vocab_size() > 0:
            return tokenizer
    raise GenerateInputError(f"tokenizer {path} is not one ExecuTorch's runners read: give "
                             f"{_TOKENIZER_KINDS}")


def check_tokenizer(tokenizer, path: str | Path, info: ProgramInfo) -> None:
    """A tokenizer with ids the program cannot embed is another model's. A
    smaller one is accepted: models pad their embedding tables."""
    size = tokenizer.vocab_size()
    if size > info.limits.vocab_size:
        raise GenerateInputError(
            f"tokenizer {path} has {size} tokens but program {info.path} embeds "
            f"{info.limits.vocab_size} (get_vocab_size): it belongs to another model. Pass the "
            "tokenizer of the model the program was exported from.")


def prompt_tokens(tokenizer, prompt: str, info: ProgramInfo, num_bos: int = 0) -> list[int]:
    """The prompt's tokens, refused when the program cannot hold them (the
    runner needs one free position after the prompt to generate into)."""
    if not prompt:
        raise GenerateInputError("the prompt is empty: the runners need at least one token")
    tokens = list(tokenizer.encode(prompt, num_bos, 0))
    if not tokens:
        raise GenerateInputError("the prompt gives no tokens with this tokenizer")
    context = info.limits.max_context_len
    if len(tokens) >= context:
        raise GenerateInputError(
            f"the prompt is {len(tokens)} tokens; program {info.path} holds "
            f"{context} positions (get_max_context_len), so a prompt must be at most "
            f"{context - 1}. Shorten the prompt or export with a larger max_context_len.")
    if info.text_chunk is not None and len(tokens) > info.text_chunk:
        raise GenerateInputError(
            f"the prompt is {len(tokens)} tokens; program {info.path}'s token_embedding and "
            f"text_decoder take at most {info.text_chunk} at once (MultimodalRunner does not "
            "split a text input). Shorten the prompt or export with a larger max_seq_len.")
    return tokens


# ---- images and audio --------------------------------------------------------

def _read_npy(path: Path, what: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise GenerateInputError(f"{what} {path} is not a .npy array: {e}") from None


RAW_SUFFIXES = (".raw", ".bin")  # bare values in the encoder's dtype and layout


def _read_raw(path: Path, meta: TensorMeta, kind: str) -> np.ndarray:
    dtype = np.dtype("float32" if meta.dtype == "bfloat16" else meta.dtype)
    want = int(np.prod(meta.shape)) * dtype.itemsize
    size = path.stat().st_size
    if size != want:
        raise GenerateInputError(
            f"{kind} {path} holds {size} bytes; program's {ENCODERS[kind]} takes "
            f"{meta.describe()}, {want} bytes of raw {dtype} values in that layout. Write "
            "exactly that (array.astype(...).tofile), or give a .npy.")
    return np.fromfile(path, dtype).reshape(meta.shape)


def read_image(path: str | Path, meta: TensorMeta,
               normalization: Normalization | None = None,
               steps: ImagePreprocessing | None = None) -> Picture:
    """The image as the encoder's [C, H, W] array, from a picture file
    (image_files.py: resized and cropped with the processor's `steps`, else
    whole to the encoder's size, normalized with `normalization` for a
    float32 encoder), a .npy of [H, W, C] or [C, H, W]
    (optionally with a batch of 1) in the encoder's dtype, or a raw file of
    its values in the encoder's layout."""
    path = Path(path)
    if not path.is_file():
        raise GenerateInputError(f"image {path} does not exist")
    suffix = path.suffix.lower()
    if suffix in PICTURE_SUFFIXES:
        channels, height, width = meta.shape[-3:]
        _check_dtype(np.zeros(0, "float32" if meta.dtype == "bfloat16" else meta.dtype),
                     meta, path, "image")  # an encoder dtype the runner can feed
        try:
            return read_picture(path, channels, height, width,
                                "float32" if meta.dtype == "bfloat16" else meta.dtype,
                                normalization, steps)
        except PictureError as e:
            raise GenerateInputError(str(e)) from None
    if suffix not in (".npy", *RAW_SUFFIXES):
        raise GenerateInputError(
            f"image {path}: generate reads pictures ({', '.join(PICTURE_SUFFIXES)}), .npy "
            f"arrays ([H, W, C] or [C, H, W], the encoder takes {meta.describe()}) and raw "
            f"{'/'.join(RAW_SUFFIXES)} values in the encoder's layout.")
    array = _read_raw(path, meta, "image") if suffix in RAW_SUFFIXES else \
        _read_npy(path, "image")
    want = meta.shape[-3:]
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    chw = array if array.ndim == 3 and array.shape == want else (
        array.transpose(2, 0, 1) if array.ndim == 3 and array.shape[-1] in (1, 3, 4) else array)
    if chw.shape != want:
        raise GenerateInputError(
            f"image {path} has shape {list(array.shape)}; program's vision_encoder takes "
            f"{meta.describe()} ([C, H, W] = {list(want)}). Resize it to {want[1]}x{want[2]} "
            f"with {want[0]} channels.")
    _check_dtype(chw, meta, path, "image")
    return Picture(np.ascontiguousarray(chw), ())


def read_audio(path: str | Path, info: ProgramInfo) -> AudioInput:
    """Audio as the program's audio_encoder input, [chunks, bins, frames]
    float32 (1 <= chunks <= the encoder's most): a .npy of features, raw
    float32 values in that layout, or a PCM .wav, made into log-mel features
    with the feature extractor's parameters the program records
    (audio_files.py), or passed as its samples [1, channels, samples] to an
    encoder that takes the waveform itself."""
    meta = info.encoders["audio"]
    path = Path(path)
    if not path.is_file():
        raise GenerateInputError(f"audio {path} does not exist")
    suffix = path.suffix.lower()
    notes: tuple[str, ...] = ()
    if suffix == ".wav" and info.mel is not None:
        try:
            audio = wav_features(path, info.mel, meta.shape[0])
        except AudioFileError as e:
            raise GenerateInputError(str(e)) from None
        array, notes = audio.array, audio.notes
        where = "the .wav's log-mel features (from the feature extractor the program records)"
    elif suffix == ".wav":
        try:
            array, rate = read_wav(path)
        except AudioFileError as e:
            raise GenerateInputError(str(e)) from None
        array = array[None]
        if info.sampling_rate is not None and rate != info.sampling_rate:
            raise GenerateInputError(
                f"audio {path} is sampled at {rate} Hz; the model's feature extractor takes "
                f"{info.sampling_rate} Hz: resample it (e.g. sox in.wav -r "
                f"{info.sampling_rate} out.wav)")
        if array.shape != meta.shape:
            samples = array.shape[2]
            log_mel = "get_audio_n_mels" in info.methods
            raise GenerateInputError(
                f"audio {path}: the .wav has {array.shape[1]} channel(s) of {samples} samples "
                f"({samples / rate:.3f} s at {rate} Hz); program's audio_encoder takes "
                f"{meta.describe()}"
                + (", log-mel features, but the program does not record its feature "
                   f"extractor's parameters ({', '.join(MEL_METHODS[1:])}; programs exported "
                   "before .wav input do not). Export it again, or compute the features with "
                   "the model's feature extractor (transformers' WhisperFeatureExtractor) and "
                   "pass them as a .npy (numpy.save)." if log_mel else
                   ". A .wav fits an encoder that takes the waveform [1, channels, samples] "
                   f"(then pad or trim it to {meta.shape[-1]} samples) or a program that "
                   "records its feature extractor's parameters; otherwise compute the "
                   "features as the model's processor does (e.g. transformers' "
                   "WhisperFeatureExtractor) and save them with numpy.save."))
        where = "the .wav's samples [1, channels, samples]"
    elif suffix == ".npy":
        array = _read_npy(path, "audio")
        array = array[None] if array.ndim == 2 else array
        where = "the features"
    elif suffix in RAW_SUFFIXES:
        array, where = _read_raw(path, meta, "audio"), "the values"
    else:
        raise GenerateInputError(f"audio {path}: give a .wav, a .npy of features or raw "
                                 f"{'/'.join(RAW_SUFFIXES)} values (the encoder takes "
                                 f"{meta.describe()})")
    # A first dimension above 1 is the most chunks an encoder takes at once.
    if array.ndim != len(meta.shape) or array.shape[1:] != meta.shape[1:] \
            or not 1 <= array.shape[0] <= meta.shape[0]:
        chunks = f" (1 to {meta.shape[0]} chunks)" if meta.shape[0] > 1 else ""
        raise GenerateInputError(
            f"audio {path}: {where} have shape {list(array.shape)}; program's audio_encoder "
            f"takes {meta.describe()}{chunks}. Compute the features as the model's processor "
            "does (e.g. a log-mel spectrogram) and save them with numpy.save.")
    _check_dtype(array, meta, path, "audio")
    return AudioInput(np.ascontiguousarray(array), notes)


def _check_dtype(array: np.ndarray, meta: TensorMeta, path: Path, kind: str) -> None:
    want = "float32" if meta.dtype == "bfloat16" else meta.dtype
    method = ENCODERS[kind]
    if want not in _RUNNER_DTYPES[kind]:
        feeds = " or ".join(_RUNNER_DTYPES[kind])
        raise GenerateInputError(f"program's {method} takes {meta.dtype}, which ExecuTorch's "
                                 f"MultimodalRunner cannot feed ({feeds} only): export the "
                                 "encoder with such an input")
    if array.dtype != np.dtype(want):
        raise GenerateInputError(
            f"{kind} {path} is {array.dtype}; program's {method} takes {meta.dtype}"
            f"{' (given as float32)' if meta.dtype == 'bfloat16' else ''}. Save the array as "
            f"{want}{' with the values the model was trained on' if want == 'float32' else ''}.")
