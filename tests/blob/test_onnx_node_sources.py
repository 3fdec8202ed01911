"""The blob's optional "onnx_node_sources" key (profiling: ONNX node -> edge
nodes) is validated on write and on read like every key the reader uses."""
from __future__ import annotations

import json

import pytest

from executorch_tensorrt.blob import BlobError, read_blob, write_blob

BINDINGS = [{"name": "x", "dtype": "float32", "shape": [2], "is_input": True},
            {"name": "y", "dtype": "float32", "shape": [2], "is_input": False}]
GOOD = [{"node": "node_sin", "edge_nodes": ["aten_sin_default"]}]


def _meta(sources) -> dict:
    return {"io_bindings": BINDINGS, "onnx_node_sources": sources}


def test_round_trip():
    blob = read_blob(write_blob(b"engine", _meta(GOOD)))
    assert blob.metadata["onnx_node_sources"] == GOOD


@pytest.mark.parametrize("sources, words", [
    ({"node_sin": ["a"]}, "must be an array"),
    ([{"node": "n"}], "exactly 'node' and 'edge_nodes'"),
    ([{"node": "n", "edge_nodes": ["a"], "extra": 1}], "exactly 'node' and 'edge_nodes'"),
    ([{"node": "", "edge_nodes": ["a"]}], "onnx_node_sources[0].node"),
    ([{"node": 3, "edge_nodes": ["a"]}], "onnx_node_sources[0].node"),
    ([{"node": "n", "edge_nodes": "a"}], "edge_nodes must be an array"),
    ([{"node": "n", "edge_nodes": ["a\x01"]}], "edge_nodes[0]"),
])
def test_rejected_on_write_and_read(sources, words):
    with pytest.raises(BlobError, match=None) as on_write:
        write_blob(b"engine", _meta(sources))
    assert words in str(on_write.value)
    # A blob written by someone else: patch a valid one's metadata in place.
    good = write_blob(b"engine", _meta([{"node": "x" * 200, "edge_nodes": []}]))
    old = json.dumps([{"node": "x" * 200, "edge_nodes": []}], separators=(",", ":")).encode()
    new = json.dumps(sources, separators=(",", ":")).encode().ljust(len(old))
    assert old in good and len(new) == len(old)
    with pytest.raises(BlobError) as on_read:
        read_blob(good.replace(old, new))
    assert words in str(on_read.value)
