"""CUDA through the driver API (ctypes, no torch): driver, objects, graphs, device choice."""
