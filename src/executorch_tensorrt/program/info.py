"""Reads a saved .pte: methods, their I/O, delegates, operators, blob metadata."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..blob import BlobError, read_blob
from ..runtime.onnxruntime.host_memory import FallbackCopies, fallback_copies
from ..blob.metadata import BlobMetadata
from ..dtypes import by_scalar_type


def scalar_type_name(code: int) -> str:
    row = by_scalar_type(code)
    return row.numpy if row is not None and row.numpy else f"scalar_type {code}"


@dataclass
class TensorInfo:
    dtype: str
    shape: list[int]
    device: str = "cpu"


@dataclass
class DelegateInfo:
    backend: str
    size: int
    meta: BlobMetadata | None = None   # TensorRT blobs only
    engine_size: int | None = None
    onnx_size: int | None = None
    error: str | None = None
    # dtype -> bytes of the constants inside a weightless ONNX section (small
    # tensors the exporter keeps in the graph): device weights beside named data.
    graph_constants: dict[str, int] = field(default_factory=dict)
    # What the onnxruntime fallback would hold beyond the stored weights and
    # state (runtime/onnxruntime/host_memory.py); None without an ONNX model.
    fallback: FallbackCopies | None = None

    @property
    def metadata(self) -> dict | None:
        """The blob's metadata as JSON (None for other backends), for tools."""
        return self.meta.to_json() if self.meta is not None else None


@dataclass
class MethodInfo:
    name: str
    inputs: list[TensorInfo | str] = field(default_factory=list)
    outputs: list[TensorInfo | str] = field(default_factory=list)
    delegates: list[DelegateInfo] = field(default_factory=list)
    operators: list[str] = field(default_factory=list)


def _value_info(value) -> TensorInfo | str:
    val = value.val
    if hasattr(val, "scalar_type") and hasattr(val, "sizes"):
        extra = getattr(val, "extra_tensor_info", None)
        device = "cpu"
        dev = getattr(extra, "device_type", None) if extra is not None else None
        # schema.DeviceType is an IntEnum (CUDA = 1); str() of it is "1" on Python 3.11.
        if dev is not None and int(getattr(dev, "value", dev)) == 1:
            device = f"cuda:{int(getattr(extra, 'device_index', 0) or 0)}"
        code = int(getattr(val.scalar_type, "value", val.scalar_type))
        return TensorInfo(scalar_type_name(code), list(val.sizes), device)
    return type(val).__name__


def read_pte(path: str | Path):
    """The deserialized .pte (executorch.exir PTEFile: program, named data)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = Path(path).read_bytes()
    try:
        return deserialize_pte_binary(data)
    except Exception as e:  # noqa: BLE001 - the deserializer raises many kinds
        raise ValueError(f"{path} is not a valid ExecuTorch program: {e}") from None


def read_program(path: str | Path) -> list[MethodInfo]:
    return describe_program(read_pte(path).program, str(path))


def describe_program(program, source: str = "the program") -> list[MethodInfo]:
    """The methods of a deserialized program (executorch.exir.schema.Program);
    ValueError naming `source` when its tables are damaged."""
    try:
        return _methods(program)
    except (TypeError, IndexError, AttributeError, KeyError) as e:
        # The flatbuffer parsed but its tables do not hold together (a missing
        # method table, an index past a list): damaged, as ExecuTorch would say.
        raise ValueError(f"{source} is not a valid ExecuTorch program: its tables are damaged "
                         f"({type(e).__name__}: {e}); export it again") from None


def _methods(program) -> list[MethodInfo]:
    methods = []
    for plan in program.execution_plan:
        info = MethodInfo(plan.name)
        info.inputs = [_value_info(plan.values[i]) for i in plan.inputs]
        info.outputs = [_value_info(plan.values[i]) for i in plan.outputs]
        info.operators = [f"{op.name}.{op.overload}" if op.overload else op.name
                          for op in plan.operators]
        for delegate in plan.delegates:
            blob_bytes = bytes(program.backend_delegate_data[delegate.processed.index].data)
            d = DelegateInfo(delegate.id, len(blob_bytes))
            if delegate.id == "TensorRTBackend":
                try:
                    b = read_blob(blob_bytes)
                    d.meta, d.engine_size = b.meta, len(b.engine)
                    d.onnx_size = len(b.onnx) if b.onnx is not None else None
                    if b.onnx is not None and b.meta.weights is not None:
                        d.graph_constants = _graph_constants(b.onnx)
                    if b.onnx is not None:
                        d.fallback = _fallback_copies(b)
                except BlobError as e:
                    d.error = str(e)
            info.delegates.append(d)
        methods.append(info)
    return methods


def _fallback_copies(blob) -> FallbackCopies | None:
    """None when the ONNX does not parse: loading the program says why."""
    from google.protobuf.message import DecodeError

    try:
        return fallback_copies(blob.meta, blob.onnx)
    except DecodeError:
        return None


def _graph_constants(onnx_bytes: bytes) -> dict[str, int]:
    import onnx
    from onnx.external_data_helper import uses_external_data

    from ..dtypes import by_onnx

    graph = onnx.load_model_from_string(onnx_bytes).graph
    tensors = [t for t in graph.initializer if not uses_external_data(t)]
    tensors += [a.t for n in graph.node if n.op_type == "Constant"
                for a in n.attribute if a.name == "value"]
    out: dict[str, int] = {}
    for t in tensors:
        row = by_onnx(t.data_type)
        count = 1
        for d in t.dims:
            count *= d
        name = row.blob_name or row.torch if row is not None else f"onnx type {t.data_type}"
        out[name] = out.get(name, 0) + count * (row.itemsize if row is not None else 1)
    return out


# Host<->device copies ExecuTorch inserts at CUDA delegate boundaries.
ET_COPY_OPS = ("et_copy::_h2d_copy", "et_copy::_d2h_copy")


def device_tensors(method: MethodInfo) -> list[str]:
    """The method's inputs and outputs recorded on a device, as 'input[0] on cuda:0'."""
    return [f"{kind}[{i}] on {v.device}"
            for kind, values in (("input", method.inputs), ("output", method.outputs))
            for i, v in enumerate(values)
            if isinstance(v, TensorInfo) and v.device != "cpu"]


def device_resident_problems(methods: list[MethodInfo]) -> list[str]:
    """Why a program is not device-resident: et_copy ops, or I/O not recorded on CUDA."""
    problems = []
    for m in methods:
        copies = [op for op in m.operators if op.split(".", 1)[0] in ET_COPY_OPS]
        if copies:
            problems.append(f"method {m.name}: the operator table has {', '.join(copies)} "
                            "(ExecuTorch copies between host and device memory)")
        for kind, values in (("input", m.inputs), ("output", m.outputs)):
            for i, v in enumerate(values):
                if not isinstance(v, TensorInfo):
                    problems.append(f"method {m.name}: {kind}[{i}] is a {v}, not a CUDA tensor")
                elif not v.device.startswith("cuda"):
                    problems.append(f"method {m.name}: {kind}[{i}] ({v.dtype} {v.shape}) is "
                                    f"recorded on {v.device}, not on a CUDA device")
    return problems


def format_program(methods: list[MethodInfo]) -> str:
    lines = []
    for m in methods:
        lines.append(f"method {m.name}")
        for kind, values in (("input", m.inputs), ("output", m.outputs)):
            for i, v in enumerate(values):
                desc = (f"{v.dtype} {v.shape} on {v.device}" if isinstance(v, TensorInfo) else v)
                lines.append(f"  {kind}[{i}]: {desc}")
        backends: dict[str, int] = {}
        for d in m.delegates:
            backends[d.backend] = backends.get(d.backend, 0) + 1
        lines.append("  delegates: " + (", ".join(f"{b} x{n}" for b, n in backends.items())
                                        or "none"))
        for i, d in enumerate(m.delegates):
            if d.backend != "TensorRTBackend":
                lines.append(f"    [{i}] {d.backend}: {d.size} bytes")
            elif d.error:
                lines.append(f"    [{i}] TensorRTBackend: INVALID BLOB: {d.error}")
            else:
                md = d.meta
                ios = ", ".join(f"{'in' if b.is_input else 'out'} {b.name} {b.dtype}"
                                f"{list(b.shape)}" for b in md.io_bindings)
                weights = md.weights or ()
                held = (f"weights in named data ({len(weights)}, "
                        f"{sum(w.nbytes for w in weights)} bytes)" if weights
                        else "weights inline")
                cc = md.build.compute_capabilities
                lines.append(f"    [{i}] TensorRTBackend: engine {md.engine_kind}, "
                             f"{d.engine_size} bytes ({md.build.trt_flavor} "
                             f"{md.build.trt_version}, compute capabilities "
                             f"{list(cc) if isinstance(cc, tuple) else cc}), onnx {d.onnx_size} bytes, "
                             f"{held}; {ios}")
        lines.append("  operators outside delegates: " + (", ".join(m.operators) or "none"))
    return "\n".join(lines)
