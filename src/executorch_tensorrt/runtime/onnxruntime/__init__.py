"""The onnxruntime executor: C API session, named weights, CUDA staging, native plans."""
