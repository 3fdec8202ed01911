"""The installed wheel's requirements (its METADATA, what pip resolves) name the
same pinned packages on x86_64 and aarch64, [rtx] included: PyPI serves each of
them for both (tensorrt-rtx-cu13 is one pure-Python source distribution whose
-libs and -bindings have wheels for both; docs/aarch64.md, "The [rtx] extra on
aarch64"), so a marker that drops one on either architecture is a regression.
The resolution itself was run under qemu-aarch64; this checks what CI can."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "release"))
import pins as pinslib  # noqa: E402

PINS = pinslib.load_pins(REPO)
ARCHES = ("x86_64", "aarch64")


def applying(requirements: list[str], machine: str, extra: str) -> dict[str, str]:
    """name -> version specifier of the requirements whose markers hold on a
    Linux host of `machine` asking for `extra` ("" for none)."""
    env = {**default_environment(), "platform_machine": machine, "platform_system": "Linux",
           "sys_platform": "linux", "extra": extra}
    reqs = [Requirement(r) for r in requirements]
    return {r.name.lower(): str(r.specifier) for r in reqs
            if r.marker is None or r.marker.evaluate(env)}


@pytest.fixture(scope="module")
def requirements() -> list[str]:
    return importlib.metadata.requires("executorch-tensorrt") or []


@pytest.mark.parametrize("extra", ["", "rtx"])
def test_same_requirements_on_both_architectures(requirements, extra):
    x86, arm = (applying(requirements, m, extra) for m in ARCHES)
    assert arm == x86, f"[{extra}] differs by architecture: x86_64 {x86}, aarch64 {arm}"


@pytest.mark.parametrize("machine", ARCHES)
def test_rtx_extra_brings_the_pinned_tensorrt_rtx(requirements, machine):
    pinned = PINS.get("tensorrt-rtx-cu13")
    assert applying(requirements, machine, "rtx").get("tensorrt-rtx-cu13") == f"=={pinned}"
    assert "tensorrt-rtx-cu13" not in applying(requirements, machine, "")


def test_a_marker_that_drops_rtx_on_aarch64_is_caught():
    # The check above on a mutated requirement list: it must see the difference.
    mutated = [f'tensorrt-rtx-cu13=={PINS.get("tensorrt-rtx-cu13")}; '
               'extra == "rtx" and platform_machine == "x86_64"']
    x86, arm = (applying(mutated, m, "rtx") for m in ARCHES)
    assert "tensorrt-rtx-cu13" in x86 and "tensorrt-rtx-cu13" not in arm
