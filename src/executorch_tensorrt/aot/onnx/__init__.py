"""ONNX export of a partition: export, fusions, extra ops, translatable ops, precision."""
