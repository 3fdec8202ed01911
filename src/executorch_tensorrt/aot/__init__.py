"""Ahead-of-time side: partitioner, backend preprocess, export."""
from .backend import TensorRTBackend
from .compile_spec import TensorRTCompileSpec
from .partitioner import TensorRTPartitioner

__all__ = ["TensorRTBackend", "TensorRTCompileSpec", "TensorRTPartitioner"]
