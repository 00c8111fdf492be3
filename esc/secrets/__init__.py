"""Secrets: `redaction.py` is the filter every written text passes (which values are secrets, in which
spellings; it imports nothing from esc). What a run writes is kept free of keys by `esc.masking`
(manifest, command line, W&B, Hydra's files), which sits above the file writers it uses."""
