"""The ctypes mirror (runtime/adapter/abi.py) matches the C header field by field.

A small C program compiled against the real executor_table.h prints the
size, alignment and every field offset/size of each struct plus the
constants; the ctypes structures must agree exactly, and every field of one
must exist in the other.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HEADER = REPO / "native" / "include" / "executorch_tensorrt" / "executor_table.h"


def _load_abi():
    # By path: importing the package would load the adapter.
    spec = importlib.util.spec_from_file_location(
        "_etrt_abi_under_test", REPO / "src" / "executorch_tensorrt" / "runtime" / "adapter" / "abi.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


abi = _load_abi()

STRUCTS = {
    "etrt_arg": abi.EtrtArg,
    "etrt_compile_spec": abi.EtrtCompileSpec,
    "etrt_init_args": abi.EtrtInitArgs,
    "etrt_executor_table": abi.EtrtExecutorTable,
    "etrt_arg_signature": abi.EtrtArgSignature,
    "etrt_native_plan": abi.EtrtNativePlan,
    "etrt_position_check": abi.EtrtPositionCheck,
    "etrt_index_check": abi.EtrtIndexCheck,
    "etrt_staged_copy": abi.EtrtStagedCopy,
    "etrt_cuda_graph_plan": abi.EtrtCudaGraphPlan,
    "etrt_arg_bounds": abi.EtrtArgBounds,
    "etrt_equal_dim": abi.EtrtEqualDim,
}
CONSTANTS = [
    "ETRT_EXECUTOR_ABI_VERSION", "ETRT_ARG_TENSOR", "ETRT_ARG_INT", "ETRT_ARG_DOUBLE",
    "ETRT_ARG_BOOL", "ETRT_ARG_NONE", "ETRT_DEVICE_CPU", "ETRT_DEVICE_CUDA",
    "ETRT_PLAN_ORT_RUN", "ETRT_PLAN_CUDA_GRAPH", "ETRT_OUTPUT_IN_PLACE", "ETRT_OUTPUT_ALLOCATED",
    "ETRT_OUTPUT_FOLLOWS",
]


def _header_fields(struct: str) -> list[str]:
    """Field names of `typedef struct <struct> { ... }` in the header, in order."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), text, re.S)
    assert body, f"{struct} not found in {HEADER}"
    names = []
    for decl in body.group(1).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)  # function pointer
        names.append(fp.group(1) if fp else re.search(r"(\w+)\s*$", decl).group(1))
    return names


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler (gcc/cc) on PATH; test_abi needs one")
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             "#include <executorch_tensorrt/executor_table.h>",
             "#define F(s, f) printf(\"field %s %s %zu %zu\\n\", #s, #f, "
             "offsetof(s, f), sizeof(((s*)0)->f));",
             "int main(void) {"]
    for struct in STRUCTS:
        lines.append(f'  printf("struct {struct} %zu %zu\\n", sizeof({struct}), _Alignof({struct}));')
        for field in _header_fields(struct):
            lines.append(f"  F({struct}, {field})")
    for const in CONSTANTS:
        lines.append(f'  printf("const {const} %lld\\n", (long long)({const}));')
    lines += ["  return 0;", "}"]
    d = tmp_path_factory.mktemp("abi")
    (d / "layout.c").write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", str(HEADER.parents[1]),
                    str(d / "layout.c"), "-o", str(d / "layout")], check=True)
    out = subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True).stdout
    layout: dict = {"struct": {}, "field": {}, "const": {}}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "struct":
            layout["struct"][rest[0]] = (int(rest[1]), int(rest[2]))
        elif kind == "field":
            layout["field"].setdefault(rest[0], []).append((rest[1], int(rest[2]), int(rest[3])))
        else:
            layout["const"][rest[0]] = int(rest[1])
    return layout


@pytest.mark.parametrize("struct", list(STRUCTS))
def test_struct_layout_matches_header(struct, c_layout):
    cls = STRUCTS[struct]
    size, align = c_layout["struct"][struct]
    assert ctypes.sizeof(cls) == size, f"sizeof({struct})"
    assert ctypes.alignment(cls) == align, f"alignof({struct})"
    c_fields = c_layout["field"][struct]
    py_fields = [(name, getattr(cls, name).offset, getattr(cls, name).size)
                 for name, _ in cls._fields_]
    assert py_fields == c_fields


def test_constants_match_header(c_layout):
    for const in CONSTANTS:
        assert getattr(abi, const) == c_layout["const"][const], const


def test_function_pointer_signatures():
    # ctypes cannot see C prototypes; check the declared ones against the
    # header text so a changed parameter list fails here.
    text = re.sub(r"\s+", " ", HEADER.read_text())
    assert "int32_t (*is_available)(void);" in text
    assert ("int32_t (*init)(const etrt_init_args* args, uint64_t* handle, "
            "uint32_t* num_inputs, uint32_t* num_outputs);") in text
    assert "int32_t (*execute)(uint64_t handle, etrt_arg* args, uint64_t num_args);" in text
    assert "void (*destroy)(uint64_t handle);" in text
    assert abi.IsAvailableFn._restype_ is ctypes.c_int32 and abi.IsAvailableFn._argtypes_ == ()
    assert abi.InitFn._restype_ is ctypes.c_int32
    assert abi.InitFn._argtypes_ == (ctypes.POINTER(abi.EtrtInitArgs), ctypes.POINTER(ctypes.c_uint64),
                                     ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32))
    assert abi.ExecuteFn._restype_ is ctypes.c_int32
    assert abi.ExecuteFn._argtypes_ == (ctypes.c_uint64, ctypes.POINTER(abi.EtrtArg), ctypes.c_uint64)
    assert abi.DestroyFn._restype_ is None and abi.DestroyFn._argtypes_ == (ctypes.c_uint64,)


def test_make_table_keeps_callbacks():
    table = abi.make_table(lambda: 1, lambda *a: 0, lambda *a: 0, lambda h: None)
    assert table.struct_size == ctypes.sizeof(abi.EtrtExecutorTable)
    assert table.abi_version == abi.ETRT_EXECUTOR_ABI_VERSION
    assert table.is_available() == 1  # callable through the struct
    assert len(table._callbacks) == 5
    assert not table.native_plan  # optional: NULL when not given


def test_native_plan_slot_is_appended_last():
    """native_plan was appended without an abi_version change: a table built
    before it (struct_size ending at destroy) must stay a valid prefix."""
    assert abi.EtrtExecutorTable.native_plan.offset == ctypes.sizeof(abi.EtrtExecutorTable) - 8
    assert abi.EtrtExecutorTable._fields_[-1][0] == "native_plan"
    assert abi.NativePlanFn._argtypes_ == (
        ctypes.c_uint64, ctypes.POINTER(ctypes.POINTER(abi.EtrtNativePlan)))
