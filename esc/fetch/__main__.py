"""`python -m esc.fetch`: fill data/ from the pinned manifest (see esc/fetch/fetcher.py)."""

import sys

from esc.fetch.fetcher import main

sys.exit(main())
