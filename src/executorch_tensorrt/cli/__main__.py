"""`python -m executorch_tensorrt.cli.main`: the executorch-tensorrt command line."""
import sys

from .main import main

sys.exit(main())
