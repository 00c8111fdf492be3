"""rank.py's modes: each a registered task (`mode.py`), one module per mode, and the rank.py job.

It sits above every stage, so that it may pick among them; the stages never import it."""
