"""`python -m autofusion.benchmarks [options]`: the same as `autofusion bench [options]`."""
import sys

from .cli import main

sys.exit(main(prog="python -m autofusion.benchmarks"))
