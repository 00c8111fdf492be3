"""`python -m esc.datasets` is the same as `python -m esc.datasets.fetch`."""

import sys

from esc.datasets.fetch import main

sys.exit(main())
