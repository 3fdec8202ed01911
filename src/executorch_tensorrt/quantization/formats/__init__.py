"""The quantization formats: one module each, what `registry.py` lists.

A format module provides what `registry.FormatSteps` names: its ops' ONNX
translations (`TRANSLATIONS`), the rewrite of its placeholders after export
(`lower_onnx`), the module forms quantize() builds (`quantize_linear`,
`quantize_embedding`, `check_options`) and the pieces the importers build its
layers from (`linear_module`, `dequantize_weight`, ...); None where it has
none. It imports torch; the registry loads it on first use by its dotted path,
and nothing else imports it by name.
"""
