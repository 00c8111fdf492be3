"""`python -m esc`: the same as the `esc` command."""

import sys

from esc.cli import main

if __name__ == "__main__":
    sys.exit(main())
