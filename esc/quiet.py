"""Third-party warnings that tell a user of this repo nothing they can act on, silenced by name.

Each entry names the warning (its text), where it comes from and why it is noise here; anything else
still shows. `quiet_third_party` is called at the top of each entry point (train.py, evaluate.py,
rank.py, build_cards.py); `tests/test_quiet_runs.py` checks that a tiny run of each prints no
`Warning` line.
"""

from __future__ import annotations

import logging
import re
import warnings

#: (warning text, a regex from its start; why it is not the user's to act on)
WARNINGS: tuple[tuple[str, str], ...] = (
    # transformers 5 renamed these; peft and Lightning still call the old names (nothing to change here)
    (r"`is_gradient_checkpointing` is deprecated", "transformers 5 rename, called by peft"),
    (r"`gradient_checkpointing_enable` is deprecated", "transformers 5 rename, called by peft"),
    (r"`past_key_values` is deprecated", "transformers 5 rename; the repo's decoding passes the cache by it"),
    # Lightning's own use of torch's pytree API on torch 2.13
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", "Lightning internals on torch 2.13"),
    # a LoRA model's frozen base keeps its dropout modules in eval mode on purpose
    (r"Found \d+ module\(s\) in eval mode at the start of training", "LoRA: the frozen base, on purpose"),
)
#: (logger, message regex): log records of libraries, said at every run (a filter acts at the logger
#: that makes the record, not at its parents)
LOG_RECORDS: tuple[tuple[str, str], ...] = (
    ("pytorch_lightning.utilities.rank_zero", r".*\blitlogger\b"),  # an advertisement
    # DeepSpeed, imported by the libraries on every run, found no GPU: this repo says so itself, per model
    ("DeepSpeed", r"Setting accelerator to CPU"),
    ("transformers.utils.generic", r".*`past_key_values`/`cache_params` are deprecated"),
    # on CPUs with AVX512_BF16: an optional 4-bit kernel from the model hub, which this repo never uses
    # on the CPU (QLoRA is a GPU path) and cannot download
    ("bitsandbytes.backends.cpu.ops", r"Failed to load CPU gemm_4bit_forward from kernels-community"),
)


class _DropMatching(logging.Filter):
    def __init__(self, pattern: str) -> None:
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


def quiet_third_party() -> None:
    """Install the filters of `WARNINGS` and `LOG_RECORDS` (idempotent)."""
    for message, _why in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=Warning)
    for name, pattern in LOG_RECORDS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMatching) and f.pattern.pattern == pattern for f in logger.filters):
            logger.addFilter(_DropMatching(pattern))
