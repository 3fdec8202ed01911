"""Deploying a saved program: building its engines on the target before the
first call (`prepare`) and saying what its first load will do (`first_load`)."""
from .prepare import PartitionLoad, PreparedPartition, first_load, prepare

__all__ = ["PartitionLoad", "PreparedPartition", "first_load", "prepare"]
