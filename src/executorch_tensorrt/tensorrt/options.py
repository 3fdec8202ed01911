"""Plain build options and input profiles: what an engine build needs, with no
AOT types (aot/compile_spec.py converts its compile spec to BuildOptions;
aot/profiles/shapes.py derives profiles from torch.export, the rebuild path reads them
from the blob)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

# More would multiply build time and engine size for little gain (docs/gpu-runtime.md).
MAX_OPTIMIZATION_PROFILES = 16


@dataclass(frozen=True)
class BuildOptions:
    """Options of one engine build.

    compute_capabilities: targets such as ("SM89",) for TensorRT-RTX, or None
        for its default (every capability it supports). Standard TensorRT
        builds for the GPU present and takes None only.
    workspace_bytes: builder workspace limit, None for TensorRT's default.
    precision: recorded with the build; the ONNX model's types already carry it.
    """

    compute_capabilities: tuple[str, ...] | None = None
    workspace_bytes: int | None = None
    precision: str = "fp32"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class InputProfile:
    """min/opt/max shapes of one input; equal for a static input."""
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    @property
    def is_dynamic(self) -> bool:
        return self.min != self.max

    def as_dict(self, name: str) -> dict:
        return {"name": name, "min": list(self.min), "opt": list(self.opt), "max": list(self.max)}

    @classmethod
    def from_dict(cls, entry: dict) -> "InputProfile":
        return cls(tuple(entry["min"]), tuple(entry["opt"]), tuple(entry["max"]))


# One optimization profile: an InputProfile per network input, in the
# network's input order, or by input name (the rebuild path, which knows names).
ProfileSet = list[InputProfile] | dict[str, InputProfile]


def profile_sets(profiles: Sequence[InputProfile] | Sequence[ProfileSet] | None
                 ) -> list[ProfileSet]:
    """The optimization profiles of a build: `profiles` is one list of
    InputProfile (one profile, as before several were possible) or a list of
    profiles."""
    if not profiles:
        return []
    if all(isinstance(p, InputProfile) for p in profiles):
        return [list(profiles)]
    return [dict(s) if isinstance(s, dict) else list(s) for s in profiles]
