"""Every file that names a pinned version agrees with pins.toml, and the installed
packages are the pinned ones. The checker is run on mutated copies to show that
each check can fail."""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
from pathlib import Path

import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "release"))
import pins as pinslib  # noqa: E402

PINS = pinslib.load_pins(REPO)


# ------------------------------------------------------------------ the real repository


def test_pins_toml_is_well_formed():
    assert PINS.python, "pins.toml [python] is empty"
    assert "executorch" in PINS.python
    assert len(PINS.git_version) == 40


def test_site_table_lists_existing_files():
    missing = [rel for rel in pinslib.SITES if not (REPO / rel).is_file()]
    assert not missing, f"tools/release/pins.py SITES lists files that do not exist: {missing}"


def test_pin_sites_match_pins_toml():
    problems = pinslib.check(REPO)
    assert not problems, "\n".join(problems)


def test_no_unlisted_pin_sites():
    problems = pinslib.unlisted_sites(REPO)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(PINS.python))
def test_installed_distribution_is_pinned_version(name):
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{name} is pinned in pins.toml ({PINS.python[name]}) but not installed")
    # A local version label (1.5.1+cpu) names the same release.
    assert Version(Version(installed).public) == Version(Version(PINS.python[name]).public), (
        f"installed {name} {installed} != pins.toml {PINS.python[name]}")


def test_installed_executorch_commit_is_pinned_commit():
    import executorch.version

    assert executorch.version.git_version == PINS.git_version, (
        f"installed executorch was built from {executorch.version.git_version}, "
        f"pins.toml says {PINS.git_version}")
    assert Version(Version(executorch.version.__version__).public) == Version(PINS.python["executorch"])


# ------------------------------------------------------------------ a synthetic repository


def _v(name: str) -> str:
    return PINS.python[name]


def _bump(version: str) -> str:
    v = Version(version)
    return f"{v.major}.{v.minor}.{v.micro + 1}"


def synthetic_files() -> dict[str, str]:
    """One file of every kind the checker reads, built from the real pins."""
    ci = f"""#!/usr/bin/env bash
set -euo pipefail
# pip install executorch==0.9.0   (a comment: ignored)
python -m pip install --index-url https://download.pytorch.org/whl/cpu torch=={_v('torch')}
pip install \\
    "executorch=={_v('executorch')}" \\
    'onnx == {_v('onnx')}' onnxscript=={_v('onnxscript')} \\
    "onnxruntime=={_v('onnxruntime')}; python_version >= '3.10'" \\
    -e . # executorch==0.1.0 in a trailing comment
pip install -r requirements-dev.txt pytest && echo done
"""
    readme = f"""# executorch-tensorrt

Install it with `pip install executorch-tensorrt executorch=={_v('executorch')}`.
An old release, executorch==0.3.0, mentioned in prose is not an install command.

<!--
pip install executorch==0.2.0
-->

```bash
# pip install tensorrt-rtx-cu13==0.0.1
pip install "tensorrt-rtx-cu13[extra]=={_v('tensorrt-rtx-cu13')}"
```

<!-- end of install section -->
"""
    cmake = f"""cmake_minimum_required(VERSION 3.25)
# find_package(executorch 0.4.0 REQUIRED)
#[[ set(ETRT_EXECUTORCH_VERSION "0.5.0") ]]
set(ETRT_EXECUTORCH_VERSION "{_v('executorch')}")
find_package(executorch ${{ETRT_EXECUTORCH_VERSION}} EXACT REQUIRED CONFIG)
"""
    return {
        "pyproject.toml": pinslib.read_text(REPO / "pyproject.toml"),
        ".ci/run": ci,
        "README.md": readme,
        "native/CMakeLists.txt": cmake,
    }


PYPROJECT_SITES = pinslib.SITES["pyproject.toml"]  # the synthetic repo copies the real one
ONE_SITE_LESS = f"pyproject.toml: expected {PYPROJECT_SITES} pin sites, found {PYPROJECT_SITES - 1}"
SYNTHETIC_SITES = {"pyproject.toml": PYPROJECT_SITES, ".ci/run": 5, "README.md": 2,
                   "native/CMakeLists.txt": 1}


def make_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    shutil.copy(REPO / "pins.toml", root / "pins.toml")
    for rel, text in (files or synthetic_files()).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text.encode())
    return root


def check(root: Path) -> list[str]:
    return pinslib.check(root, pinslib.load_pins(root), SYNTHETIC_SITES)


def test_synthetic_repository_passes(tmp_path):
    assert check(make_repo(tmp_path)) == []


def test_synthetic_sites_are_the_expected_ones(tmp_path):
    root = make_repo(tmp_path)
    found = {rel: [(s.line, s.text) for s in pinslib.pinned_sites(pinslib.parse_file(root / rel, rel), PINS)]
             for rel in SYNTHETIC_SITES}
    assert found[".ci/run"] == [
        (4, f"torch=={_v('torch')}"),
        (5, f"executorch=={_v('executorch')}"),
        (5, f"onnx == {_v('onnx')}"),
        (5, f"onnxscript=={_v('onnxscript')}"),
        (5, f"onnxruntime=={_v('onnxruntime')}; python_version >= '3.10'"),
    ]
    assert found["README.md"] == [
        (3, f"executorch=={_v('executorch')}"),
        (12, f"tensorrt-rtx-cu13[extra]=={_v('tensorrt-rtx-cu13')}"),
    ]
    assert found["native/CMakeLists.txt"] == [(4, _v("executorch"))]


def _mutate(root: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    text = pinslib.read_text(root / rel)
    assert old in text, f"{old!r} not in {rel}"
    (root / rel).write_bytes(text.replace(old, new, count).encode())


ET = _v("executorch")
MUTATIONS = {
    # name: (file, old, new, what the report must say)
    "pyproject-wrong-version": ("pyproject.toml", f'"executorch=={ET}"', f'"executorch=={_bump(ET)}"',
                                ["pyproject.toml:", f"executorch=={_bump(ET)}", f"pins executorch=={ET}"]),
    "pyproject-ge-operator": ("pyproject.toml", f'"torch=={_v("torch")}"', f'"torch>={_v("torch")}"',
                              ["pyproject.toml:", f"torch>={_v('torch')}"]),
    "pyproject-spaces-and-marker": (
        "pyproject.toml", f'"onnx=={_v("onnx")}"', f'"onnx ==  {_bump(_v("onnx"))} ; python_version >= \'3.10\'"',
        ["pyproject.toml:", f"onnx=={_bump(_v('onnx'))}"]),
    "pyproject-extra-spec": ("pyproject.toml", f'"onnxscript=={_v("onnxscript")}"',
                             f'"onnxscript=={_v("onnxscript")},<1"', ["onnxscript"]),
    "pyproject-removed-site": ("pyproject.toml", f'"onnxruntime=={_v("onnxruntime")}",', "",
                               [ONE_SITE_LESS]),
    "pyproject-site-moved-to-comment": (
        "pyproject.toml", f'    "onnxruntime=={_v("onnxruntime")}",', f'    # "onnxruntime=={_v("onnxruntime")}",',
        [ONE_SITE_LESS]),
    "ci-wrong-version": (".ci/run", f'"executorch=={ET}"', f'"executorch=={_bump(ET)}"',
                         [".ci/run:5", f"executorch=={_bump(ET)}"]),
    "ci-ge-operator": (".ci/run", f"torch=={_v('torch')}", f"'torch>={_v('torch')}'", [".ci/run:4", "torch>="]),
    "ci-compatible-operator": (".ci/run", f"onnxscript=={_v('onnxscript')}", f"onnxscript~={_v('onnxscript')}",
                               [".ci/run:5", "onnxscript~="]),
    "ci-wildcard": (".ci/run", f"onnxscript=={_v('onnxscript')}", f"onnxscript=={_v('onnxscript')}.*",
                    [".ci/run:5", "onnxscript=="]),
    "ci-spaces-and-marker": (".ci/run", f"'onnx == {_v('onnx')}'",
                             f"'onnx  ==  {_bump(_v('onnx'))} ; sys_platform == \"linux\"'",
                             [".ci/run:5", f"onnx=={_bump(_v('onnx'))}"]),
    "ci-removed-site": (".ci/run", f"onnxscript=={_v('onnxscript')} ", "",
                        [".ci/run: expected 5 pin sites, found 4"]),
    "ci-site-moved-to-comment": (".ci/run", f"torch=={_v('torch')}\n", f"\n# torch=={_v('torch')}\n",
                                 [".ci/run: expected 5 pin sites, found 4"]),
    "ci-continuation-broken-into-comment": (
        ".ci/run", "pip install \\\n", "pip install # \\\n", [".ci/run: expected 5 pin sites, found 1"]),
    "readme-wrong-inline": ("README.md", f"executorch=={ET}`", f"executorch=={_bump(ET)}`",
                            ["README.md:3", f"executorch=={_bump(ET)}"]),
    "readme-wrong-in-block-with-extras": (
        "README.md", f"[extra]=={_v('tensorrt-rtx-cu13')}", f"[extra] >= {_v('tensorrt-rtx-cu13')}",
        ["README.md:12", "tensorrt-rtx-cu13>="]),
    "readme-site-moved-to-prose": (
        "README.md", '```bash\n# pip install tensorrt-rtx-cu13==0.0.1\npip install "tensorrt-rtx-cu13',
        '# pip install tensorrt-rtx-cu13==0.0.1\npip install "tensorrt-rtx-cu13',
        ["README.md: expected 2 pin sites, found 1"]),
    "readme-block-in-html-comment": (
        "README.md", '```bash\n', '<!-- ```bash\n', ["README.md: expected 2 pin sites, found 1"]),
    "cmake-wrong-version": ("native/CMakeLists.txt", f'"{ET}"', f'"{_bump(ET)}"',
                            ["native/CMakeLists.txt:4", _bump(ET)]),
    "cmake-removed-site": ("native/CMakeLists.txt", f'set(ETRT_EXECUTORCH_VERSION "{ET}")', "",
                           ["native/CMakeLists.txt: expected 1 pin sites, found 0"]),
    "cmake-find-package-version": (
        "native/CMakeLists.txt", "${ETRT_EXECUTORCH_VERSION}", _bump(ET),
        ["native/CMakeLists.txt: expected 1 pin sites, found 2", "native/CMakeLists.txt:5", _bump(ET)]),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_checker_reports_mutation(tmp_path, mutation):
    rel, old, new, expected = MUTATIONS[mutation]
    root = make_repo(tmp_path)
    _mutate(root, rel, old, new)
    problems = check(root)
    assert problems, f"{mutation}: the checker accepted a broken {rel}"
    report = "\n".join(problems)
    for piece in expected:
        assert piece in report, f"{mutation}: {piece!r} not in report:\n{report}"
    assert all(p.startswith(rel) for p in problems), report


COMMENTS = {
    ".ci/run": "# pip install executorch==0.0.1 torch==0.0.1\n  # pip install onnx>=0\n",
    "README.md": "<!-- `pip install executorch==0.0.1` -->\nexecutorch==0.0.1 in prose\n"
                 "```sh\n# pip install executorch==0.0.1\n```\n",
    "native/CMakeLists.txt": "# find_package(executorch 0.0.1 REQUIRED)\n"
                             "#[==[\nset(ETRT_EXECUTORCH_VERSION 0.0.1)\n]==]\n",
    "pyproject.toml": '# requires = ["executorch==0.0.1"]\n',
}


@pytest.mark.parametrize("rel", sorted(COMMENTS))
def test_commented_pins_are_ignored(tmp_path, rel):
    root = make_repo(tmp_path)
    text = pinslib.read_text(root / rel)
    (root / rel).write_bytes((text + COMMENTS[rel]).encode())
    assert check(root) == []


def test_wrong_pin_in_pins_toml_is_reported(tmp_path):
    root = make_repo(tmp_path)
    _mutate(root, "pins.toml", f'executorch = "{ET}"', f'executorch = "{_bump(ET)}"')
    report = "\n".join(check(root))
    # every executorch site now disagrees (the requirements, and the CMake line)
    requirements = [s for rel in SYNTHETIC_SITES for s in pinslib.parse_file(root / rel, rel)
                    if s.name == "executorch" and s.kind == "requirement"]
    assert len(requirements) >= 4
    assert report.count(f"pins.toml pins executorch=={_bump(ET)}") == len(requirements), report
    assert f"but pins.toml pins {_bump(ET)}" in report, report


def test_listed_file_missing_is_reported(tmp_path):
    root = make_repo(tmp_path)
    (root / "README.md").unlink()
    assert check(root) == ["README.md: listed in tools/release/pins.py SITES but does not exist"]


def test_unlisted_file_with_pins_is_reported(tmp_path):
    root = make_repo(tmp_path)
    (root / "docs").mkdir()
    (root / "docs/install.md").write_text(f"```\npip install executorch=={ET}\n```\n")
    (root / "docs/other.md").write_text("```\npip install numpy==1.0\n```\n")
    problems = pinslib.unlisted_sites(root, sites=SYNTHETIC_SITES)
    assert problems == [f"docs/install.md: names pinned versions (line 2 'executorch=={ET}') but is "
                        f"not in SITES in tools/release/pins.py; add \"docs/install.md\": 1"]


@pytest.mark.parametrize("rel", sorted(pinslib.SITES))
def test_every_real_site_mutation_is_caught(tmp_path, rel):
    """For the real listed files: each pinned site, changed or removed, is reported."""
    root = tmp_path
    shutil.copy(REPO / "pins.toml", root / "pins.toml")
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    original = pinslib.read_text(REPO / rel)
    sites = pinslib.pinned_sites(pinslib.parse_file(REPO / rel, rel), PINS)
    assert sites, f"{rel} is listed but has no pin sites"
    table = {rel: pinslib.SITES[rel]}
    for site in sites:
        chunk = original[site.start:site.end]
        pin = PINS.python[site.name]
        if site.kind == "cmake":
            variants = {"wrong": chunk.replace(pin, _bump(pin)), "removed": None}
        else:
            assert site.text in chunk, (site, chunk)
            bad = site.text.replace(pin, _bump(pin), 1)
            assert bad != site.text, f"{rel}:{site.line}: {site.text!r} does not spell {pin}"
            variants = {"wrong": chunk.replace(site.text, bad, 1),
                        "removed": chunk.replace(site.text, "unpinned-distribution", 1)}
        for what, new_chunk in variants.items():
            if new_chunk is None:  # remove the whole line
                ls = original.rfind("\n", 0, site.start) + 1
                le = original.find("\n", site.end)
                text = original[:ls] + original[le + 1 if le >= 0 else len(original):]
            else:
                text = original[:site.start] + new_chunk + original[site.end:]
            (root / rel).write_bytes(text.encode())
            problems = pinslib.check(root, PINS, table)
            assert problems, f"{rel}:{site.line}: {what} {site.text!r} was not reported"
            if what == "wrong":
                assert any(f"{rel}:{site.line}:" in p for p in problems), problems
            else:
                assert any("pin sites, found" in p for p in problems), problems
