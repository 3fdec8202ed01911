"""The `executorch-tensorrt` command line (`python -m executorch_tensorrt.cli.main`)."""
from .main import main

__all__ = ["main"]
