"""Compile specs of TensorRTBackend: typed options <-> ExecuTorch CompileSpecs."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields

from executorch.exir.backend.compile_spec_schema import CompileSpec

from ..tensorrt.options import BuildOptions
from .state.fp8_cache import check_kv_cache_dtype, fp8_refusal
from .profiles.option import ProfileOption, normalize_profiles, profiles_json

PRECISIONS = ("fp32", "fp16", "bf16")
_CC = re.compile(r"^SM(\d{2,3})$")
# ExecuTorch's own key (PropagateDevicePass): b"cuda:<device_id>" on a delegate
# places its inputs and outputs in CUDA memory (device_resident.py adds it).
TARGET_DEVICE_KEY = "target_device"
# Names the partitioner's ONNX export cache for preprocess (onnx/export_cache.py);
# not an engine option, and meaningless outside the exporting process.
EXPORT_CACHE_KEY = "onnx_export_cache"


@dataclass(frozen=True)
class TensorRTCompileSpec:
    """Options of one TensorRT engine build.

    compute_capabilities: targets such as ("SM89",) for TensorRT-RTX, or
        None for its default (every capability it supports, so one engine
        serves all of them). Standard TensorRT builds for the GPU present.
    workspace_bytes: builder workspace limit, None for TensorRT's default.
    device_id: CUDA device the engine runs on.
    precision: "fp32" (default), "fp16" or "bf16": the engine computes in that
        precision; the delegate's inputs and outputs keep their dtypes.
    inline_weights: keep today's self-contained blob (a plan with its weights
        and an ONNX model with its weights: twice the weights, < 2 GB per
        partition, no refit or build at load) instead of the weights in the
        program's named data, once (the default).
    weights_file: the stem of the .ptd the named data goes to (export sets it
        from the .pte's name with external_weights=True); None: in the .pte.
    profiles: TensorRT optimization profiles for the dynamic dimensions
        (aot/profiles/option.py): None, one over the export ranges; N, the
        widest dimension split in power-of-two buckets; or a list of
        {dimension: (min, opt, max)} (docs/gpu-runtime.md).
    record_memory: where the blob ships no engine (no GPU at export), build
        one anyway (weights as zero stand-ins, the plan dropped) to record
        TensorRT's activation memory per profile in the blob (the LLM memory
        report, docs/llm.md "Memory"); costs one more build per partition.
    kv_cache_dtype: None (each delegate-owned KV cache in its own dtype) or
        "float8_e4m3fn": stored in fp8 with scale 1.0 (aot/state/fp8_cache.py),
        SM89+ targets only.
    """

    compute_capabilities: tuple[str, ...] | None = None
    workspace_bytes: int | None = None
    device_id: int = 0
    precision: str = "fp32"
    inline_weights: bool = False
    weights_file: str | None = None
    profiles: int | ProfileOption | None = None
    record_memory: bool = False
    kv_cache_dtype: str | None = None

    def __post_init__(self) -> None:
        ccs = self.compute_capabilities
        if ccs is not None:
            if isinstance(ccs, str):
                ccs = (ccs,)
            ccs = tuple(str(c).upper() for c in ccs)
            for cc in ccs:
                if not _CC.match(cc):
                    raise ValueError(
                        f"compute capability {cc!r} is not of the form 'SM89' "
                        "(SM followed by the major and minor digits)")
            if not ccs:
                raise ValueError("compute_capabilities is empty; pass None for the default")
            object.__setattr__(self, "compute_capabilities", ccs)
        if self.workspace_bytes is not None and (
                not isinstance(self.workspace_bytes, int) or self.workspace_bytes <= 0):
            raise ValueError(f"workspace_bytes must be a positive int, got {self.workspace_bytes!r}")
        if not isinstance(self.device_id, int) or self.device_id < 0:
            raise ValueError(f"device_id must be a non-negative int, got {self.device_id!r}")
        if not isinstance(self.record_memory, bool):
            raise ValueError(f"record_memory must be a bool, got {self.record_memory!r}")
        if not isinstance(self.inline_weights, bool):
            raise ValueError(f"inline_weights must be a bool, got {self.inline_weights!r}")
        if self.weights_file is not None and (
                not isinstance(self.weights_file, str) or not self.weights_file
                or any(c in self.weights_file for c in "/\\\0")):
            raise ValueError(f"weights_file must be a file stem (no folder), got "
                             f"{self.weights_file!r}")
        if self.inline_weights and self.weights_file is not None:
            raise ValueError("inline_weights=True keeps the weights in the blob, so there is "
                             "no .ptd to write; drop one of inline_weights and weights_file "
                             "(external_weights)")
        object.__setattr__(self, "profiles", normalize_profiles(self.profiles))
        object.__setattr__(self, "kv_cache_dtype", check_kv_cache_dtype(self.kv_cache_dtype))
        if self.kv_cache_dtype is not None:
            if self.precision != "fp32":
                raise ValueError(f"kv_cache_dtype={self.kv_cache_dtype!r} with precision="
                                 f"{self.precision!r}: the fp8 cache is written in the model's "
                                 "own dtype; export the model in float16/bfloat16 with "
                                 "precision='fp32' instead (llm.export(dtype='float16'))")
            why = fp8_refusal(self.compute_capabilities)
            if why is not None:
                raise ValueError(why)
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"precision {self.precision!r} is not supported; choose one of {PRECISIONS}")

    def to_compile_specs(self) -> list[CompileSpec]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["compute_capabilities"] = (
            list(self.compute_capabilities) if self.compute_capabilities else None)
        values["profiles"] = profiles_json(self.profiles)
        return [CompileSpec(k, json.dumps(v).encode()) for k, v in values.items()]

    @classmethod
    def from_compile_specs(cls, specs: list[CompileSpec]) -> "TensorRTCompileSpec":
        known = {f.name for f in fields(cls)}
        kwargs = {}
        target_device = None
        for spec in specs:
            if spec.key == TARGET_DEVICE_KEY:  # not an engine option: checked below
                target_device = bytes(spec.value).decode(errors="replace")
                continue
            if spec.key == EXPORT_CACHE_KEY:  # read by preprocess (onnx/export_cache.py)
                continue
            if spec.key not in known:
                raise ValueError(
                    f"unknown TensorRTBackend compile spec {spec.key!r}; known: {sorted(known)}")
            try:
                value = json.loads(bytes(spec.value).decode())
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError(f"compile spec {spec.key!r} is not valid JSON: {e}") from None
            if spec.key == "compute_capabilities" and value is not None:
                value = tuple(value)
            kwargs[spec.key] = value
        result = cls(**kwargs)
        if target_device is not None and target_device != f"cuda:{result.device_id}":
            raise ValueError(
                f"compile spec {TARGET_DEVICE_KEY!r} is {target_device!r}, but the engine is "
                f"for device_id {result.device_id}; it must be 'cuda:{result.device_id}'")
        return result

    def as_dict(self) -> dict:
        return asdict(self)

    def build_options(self) -> BuildOptions:
        """The engine-build part of this spec, for the TensorRT layer."""
        return BuildOptions(self.compute_capabilities, self.workspace_bytes, self.precision)


def with_profiles(specs: list[CompileSpec], profiles: ProfileOption | None) -> list[CompileSpec]:
    """`specs` with their "profiles" entry replaced (the partitioner's
    resolved profiles; other entries, e.g. target_device, kept)."""
    entry = CompileSpec("profiles", json.dumps(profiles_json(profiles)).encode())
    return [entry if s.key == "profiles" else s for s in specs]
