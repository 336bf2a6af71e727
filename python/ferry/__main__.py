"""python -m ferry ARGS: the ferry command, as the console entry point runs it."""
import sys

from ._cli import main

sys.exit(main())
