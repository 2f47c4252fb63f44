"""`python -m motionmatch ...`: the same as the `motionmatch` command."""
import sys

from .cli import main

sys.exit(main())
