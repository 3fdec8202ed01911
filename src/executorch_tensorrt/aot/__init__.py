"""Ahead-of-time side: partitioner, backend preprocess, engine builds, export.

Imported lazily (executorch_tensorrt.export, .TensorRTPartitioner, ...), so the
runtime side never pulls in executorch.exir.
"""
