"""Names of the marker nodes the partition's state rewrites (aot/state/)
leave in its ONNX graph, for the ONNX rules that turn them into TensorScatter
and If (decoder_fusions.py). Names only, so the ONNX side does not import the
state side, which imports the ONNX exporter."""
from __future__ import annotations

MARKER_DOMAIN = "pkg.executorch_tensorrt.state"
MARKER_OP = "KvCacheUpdate"  # a contiguous cache write (kv_update.py)
KEEP_OP = "KeepFirst"  # a write on the first step only (kept_write.py)
