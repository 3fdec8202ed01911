"""Names and input shapes of the built-in examples (examples/models.py), kept
free of torch so that the command line can list them without loading it."""
from __future__ import annotations

# name -> example input shape (one float32 input)
EXAMPLE_SHAPES: dict[str, tuple[int, ...]] = {
    "add": (2, 3),
    "cnn": (2, 3, 32, 32),
    "transformer": (2, 16, 64),
    "bitwise": (4, 8),
    "erfinv": (4, 8),
}
EXAMPLE_NAMES = tuple(sorted(EXAMPLE_SHAPES))
