"""Which optimization profile of an engine runs a call (docs/gpu-runtime.md,
"Optimization profiles").

An engine exported with several profiles (aot/profiles/shapes.py) holds one
optimization profile per size bucket; TensorRT runs a call in the profile its
execution context is set to, and refuses input shapes outside it. The rule:
a call runs in the FIRST profile, in the blob's (= the engine's) order, that
contains every input's shape. Export orders the automatic buckets from the
smallest, so that is the only bucket containing the call; with profiles of
your own that overlap, list the narrower first.

GPU-only where it switches the context (the switch itself ran on a GPU
with a labelled stand-in context, tests/runtime/tensorrt/test_tensorrt_profiles_gpu.py).
"""
from __future__ import annotations

from typing import Sequence

from ...errors import ArgumentError, InvalidProgramError
from ...blob.metadata import BlobMetadata
from ..arguments import Binding

__all__ = ["ProfileChoice", "check_engine_profiles", "engine_profile_choice", "profile_choice"]

Bounds = tuple[tuple[int, ...], tuple[int, ...]]


class ProfileChoice:
    """The profile index for each call's input shapes, and the switch of one
    execution context to it, made only when it changes."""

    def __init__(self, names: list[str], bounds: list[list[Bounds | None]]):
        self.names = names  # the engine's inputs, in call order
        self.bounds = bounds  # per profile, per input: (min, max), None for a static input
        self.current = 0  # a new context runs profile 0
        self.switches = 0
        self._chosen: dict[tuple, int] = {}

    @property
    def count(self) -> int:
        return len(self.bounds)

    def index_for(self, shapes: Sequence[tuple[int, ...]]) -> int:
        """The first profile containing every input's shape (cached per shapes)."""
        key = tuple(shapes)
        index = self._chosen.get(key)
        if index is not None:
            return index
        for k, profile in enumerate(self.bounds):
            if all(b is None or (len(b[0]) == len(s) and all(
                    lo <= d <= hi for d, lo, hi in zip(s, b[0], b[1])))
                   for s, b in zip(shapes, profile)):
                if len(self._chosen) > 256:
                    self._chosen.clear()
                self._chosen[key] = k
                return k
        raise ArgumentError(
            f"input shapes {[list(s) for s in shapes]} fit no optimization profile of the "
            f"engine; it has {self.count}: " + "; ".join(
                f"profile {k}: " + ", ".join(f"{n} min {list(b[0])} max {list(b[1])}"
                                             for n, b in zip(self.names, p) if b is not None)
                for k, p in enumerate(self.bounds))
            + ". Call with shapes inside one profile, or re-export with profiles that cover "
              "these shapes together")

    def switch(self, context, index: int, stream: int) -> bool:
        """Sets `context` to profile `index` on `stream` (in stream order,
        after work already queued there) unless it is there already; True when
        it switched: then the context's input shapes and tensor addresses must
        be set again, and a CUDA graph captured before replays the old one."""
        if index == self.current:
            return False
        self.current = -1  # unknown until TensorRT accepted it
        if not context.set_optimization_profile_async(index, stream):
            raise ArgumentError(f"TensorRT refused to switch the execution context to "
                                f"optimization profile {index}; its log says why")
        self.current = index
        self.switches += 1
        return True


def profile_choice(metadata: BlobMetadata | dict, inputs: list[Binding]) -> ProfileChoice | None:
    """The choice for a blob with several optimization profiles; None with one
    or none (the context stays in profile 0, nothing to choose per call)."""
    profiles = BlobMetadata.of(metadata).engine_profiles
    if len(profiles) < 2:
        return None
    bounds = []
    for profile in profiles:
        by_name = {p.name: (p.min, p.max) for p in profile}
        bounds.append([by_name.get(b.name) for b in inputs])
    return ProfileChoice([b.name for b in inputs], bounds)


def engine_profile_choice(engine, inputs: list[Binding]) -> ProfileChoice | None:
    """For a blob that records no profiles (Torch-TensorRT's: its engines
    carry theirs, several since its multi-profile builds), the choice from the
    engine's own profiles; None with fewer than two."""
    count = int(getattr(engine, "num_optimization_profiles", 1))
    if count < 2:
        return None
    bounds = []
    for k in range(count):
        shapes = [engine.get_tensor_profile_shape(b.name, k) for b in inputs]
        bounds.append([(tuple(s[0]), tuple(s[2])) if len(s) == 3 else None for s in shapes])
    return ProfileChoice([b.name for b in inputs], bounds)


def check_engine_profiles(engine, metadata: BlobMetadata | dict) -> None:
    """The blob's profiles are the engine's (both untrusted): as many, and each
    input's min/opt/max in each profile as TensorRT reports it, so that the
    index chosen per call is a profile of this engine with these bounds."""
    profiles = BlobMetadata.of(metadata).engine_profiles
    count = int(getattr(engine, "num_optimization_profiles", 1))
    if len(profiles) > 1 and count != len(profiles):
        raise InvalidProgramError(f"the blob lists {len(profiles)} optimization profiles, the "
                                  f"engine has {count}; the blob is corrupt or was altered")
    if len(profiles) < 2:
        return
    dynamic = {p.name for profile in profiles for p in profile if p.min != p.max}
    for k, profile in enumerate(profiles):
        for p in profile:
            if p.name not in dynamic:  # a static input: its binding's shape is checked
                continue
            got = [list(s) for s in engine.get_tensor_profile_shape(p.name, k)]
            want = [list(p.min), list(p.opt), list(p.max)]
            if got != want:
                raise InvalidProgramError(
                    f"optimization profile {k} of the engine gives input {p.name!r} min/opt/"
                    f"max {got}, the blob says {want}; the blob is corrupt or was altered")
