"""The six role-play metrics of paper Table 10 and their question prompts (`metrics.yaml`): the
role-play evaluation asks them; annotators score by them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from esc.hashing import sha256_file

ROLEPLAY_METRICS_FILE = Path(__file__).resolve().parent / "metrics.yaml"


@functools.cache
def roleplay_metrics() -> dict[str, Any]:
    return yaml.safe_load(ROLEPLAY_METRICS_FILE.read_text(encoding="utf-8"))


@functools.cache
def roleplay_question() -> tuple[str, str]:
    """The (style, version) recorded with each role-play answer: the file has no version number,
    so the start of its sha256 stands for one."""
    return ("roleplay", sha256_file(ROLEPLAY_METRICS_FILE)[:12])
