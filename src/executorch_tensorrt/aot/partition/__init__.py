"""Partitioning: which nodes TensorRT takes, checks, the partition report."""
