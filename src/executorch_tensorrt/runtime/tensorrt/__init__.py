"""The TensorRT executor: context, optimization profile choice, engine cache, rebuild, refit."""
