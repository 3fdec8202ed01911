"""`python -m executorch_tensorrt`: the executorch-tensorrt command line."""
import sys

from .cli import main

sys.exit(main())
