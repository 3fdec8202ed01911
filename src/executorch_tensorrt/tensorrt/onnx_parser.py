"""Questions to TensorRT's ONNX parser: parse a model into a network, or find
the nodes it places in no supported subgraph (the partitioner's query)."""
from __future__ import annotations

import ctypes
import functools
from typing import Sequence

import onnx

from ..errors import EngineBuildError
from .flavor import TensorRT, collecting_logger


class ParseFailure(EngineBuildError):
    """TensorRT's ONNX parser rejected nodes; `node_indices` says which."""

    def __init__(self, message: str, node_indices: list[int]):
        super().__init__(message)
        self.node_indices = node_indices


def parse_errors(parser) -> tuple[str, list[int]]:
    lines, nodes = [], []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        lines.append(f"node {err.node()} ({err.node_operator() or '?'} {err.node_name() or ''}): "
                     f"{err.code()}: {err.desc()}")
        if err.node() >= 0:
            nodes.append(int(err.node()))
    return "; ".join(lines), nodes


def _new_parser(trt: TensorRT):
    """A builder, an empty network and an ONNX parser into it, sharing one logger."""
    logger = collecting_logger(trt)
    builder = trt.module.Builder(logger)
    network = builder.create_network(0)
    return builder, network, trt.module.OnnxParser(network, logger), logger


#: (ONNX initializer name, address, size in bytes) of a weight the parser
#: reads from caller memory instead of from the model.
Initializer = tuple[str, int, int]


def parse_network(trt: TensorRT, onnx_bytes: bytes, initializers: Sequence[Initializer] = ()):
    """Parses an ONNX model into a new network. Raises ParseFailure.

    `initializers` supplies the bytes of EXTERNAL initializers (weights kept
    in named data) by address, through the parser's load_model_proto /
    load_initializer / parse_model_proto, so no model with the weights inside
    is ever formed. The memory must stay valid until the returned parser is
    gone (TensorRT reads it during the parse and the build)."""
    builder, network, parser, logger = _new_parser(trt)
    if initializers:
        initializers, logger.kept_buffers = _distinct_addresses(onnx_bytes, initializers)
        if not parser.load_model_proto(onnx_bytes):
            message, nodes = parse_errors(parser)
            raise ParseFailure(f"TensorRT's ONNX parser rejected the model: {message}", nodes)
        for name, address, nbytes in initializers:
            if not parser.load_initializer(name, address, nbytes):
                message, nodes = parse_errors(parser)
                raise ParseFailure(f"TensorRT's ONNX parser refused the {nbytes} bytes given "
                                   f"for initializer {name!r}: {message or 'no message'}", nodes)
        ok = parser.parse_model_proto()
    else:
        ok = parser.parse(onnx_bytes)
    if not ok:
        message, nodes = parse_errors(parser)
        raise ParseFailure(f"TensorRT's ONNX parser rejected the model: {message}", nodes)
    return builder, network, parser, logger


def _distinct_addresses(onnx_bytes: bytes, initializers: Sequence[Initializer]
                        ) -> tuple[list[Initializer], list[bytearray]]:
    """TensorRT identifies weights by address and refuses one address used
    with two element counts ("Weights of same values but of different
    counts"). Named data stores equal bytes once, so e.g. a float32 [1024]
    bias of zeros and an int64 [1, 512] buffer of zeros (BERT's) arrive at
    one address: such an initializer gets a private copy of its bytes, kept
    alive with the parser. Equal type and count keep sharing the address."""
    addresses = [address for _, address, _ in initializers]
    if len(set(addresses)) == len(addresses):
        return list(initializers), []
    types = {i.name: (i.data_type, _count(i.dims))
             for i in onnx.load_model_from_string(onnx_bytes).graph.initializer}
    first_type: dict[int, tuple] = {}
    out, kept = [], []
    for name, address, nbytes in initializers:
        if first_type.setdefault(address, types.get(name)) != types.get(name):
            copy = bytearray(ctypes.string_at(address, nbytes))
            kept.append(copy)
            address = ctypes.addressof((ctypes.c_char * nbytes).from_buffer(copy))
        out.append((name, address, nbytes))
    return out, kept


def _count(dims) -> int:
    count = 1
    for d in dims:
        count *= int(d)
    return count


def unsupported_nodes(trt: TensorRT, onnx_bytes: bytes) -> set[int]:
    """ONNX node indices that TensorRT's parser places in no supported subgraph.

    `is_subgraph_supported(i) == False` means "not checked", so only nodes
    outside every subgraph count as unsupported here; full parses of each
    partition are the final check. The query has no way to take weights by
    address, and with EXTERNAL weights it stops at their import and checks no
    node; so it is asked about the graph with those weights as graph inputs
    (same names, types and shapes), which costs no memory
    (tests/aot/test_named_data.py).
    """
    return set(unsupported_node_reasons(trt, onnx_bytes))


def unsupported_node_reasons(trt: TensorRT, onnx_bytes: bytes) -> dict[int, str]:
    """unsupported_nodes, each with the parser's own words for it (its error
    for that node), or a plain statement where the parser recorded none."""
    return dict(_unsupported_nodes(trt, _external_weights_as_inputs(onnx_bytes)))


def _error_words(err) -> str:
    """One parser error as TensorRT states it: its code and description; an
    op checker whose description is only its failed condition ('false') is
    named instead."""
    code = getattr(err.code(), "name", str(err.code()))
    desc = " ".join(str(err.desc()).split())
    if desc in ("", "false", "true"):
        desc = f"{err.node_operator() or 'the node'} refused by the parser's {err.func()}"
    return f"{code}: {desc}"


def _external_weights_as_inputs(onnx_bytes: bytes) -> bytes:
    model = onnx.load_model_from_string(onnx_bytes)
    graph = model.graph
    external = [i for i in graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return onnx_bytes
    for init in external:
        graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type,
                                                              list(init.dims)))
        graph.initializer.remove(init)
    return model.SerializeToString()


@functools.lru_cache(maxsize=256)
def _unsupported_nodes(trt: TensorRT, onnx_bytes: bytes) -> tuple[tuple[int, str], ...]:
    _builder, _network, parser, _logger = _new_parser(trt)  # all kept alive until done
    parser.supports_model_v2(onnx_bytes)
    covered: set[int] = set()
    for i in range(parser.num_subgraphs):
        covered.update(int(n) for n in parser.get_subgraph_nodes(i))
    # The parser's errors name the node they stopped at: its own reason.
    words: dict[int, list[str]] = {}
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        text = _error_words(err)
        if err.node() >= 0 and text and text not in words.get(int(err.node()), []):
            words.setdefault(int(err.node()), []).append(text)
    count = len(onnx.load_model_from_string(onnx_bytes).graph.node)
    return tuple((n, "; ".join(words.get(n, [])) or "in no subgraph TensorRT's parser supports")
                 for n in sorted(set(range(count)) - covered))
