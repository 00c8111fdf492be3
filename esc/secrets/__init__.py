"""Secrets: `redaction.py` is the filter every written text passes (which values are secrets, in which
spellings; it imports nothing from esc); `masking.py` keeps keys out of what a run writes (manifest,
command line, W&B, Hydra's files)."""
