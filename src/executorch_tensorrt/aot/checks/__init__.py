"""Checks at export: the run check of the written program, device residency, memory, input checks recorded for the runtime, runtime kernels."""
