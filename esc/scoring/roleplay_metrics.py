"""The six role-play metrics of paper Table 10 and their question prompts (`metrics.yaml`): the
role-play evaluation asks them; annotators score by them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from esc.prompts.registry import checked_question_texts

ROLEPLAY_METRICS_FILE = Path(__file__).resolve().parent / "roleplay_metrics.yaml"


@functools.cache
def roleplay_metrics() -> dict[str, Any]:
    """The file's contents, its texts checked against their version's checksum (`esc/prompts`)."""
    data = yaml.safe_load(ROLEPLAY_METRICS_FILE.read_text(encoding="utf-8"))
    data["sha256"] = checked_question_texts("roleplay_metrics", data, ROLEPLAY_METRICS_FILE)
    return data


@functools.cache
def roleplay_question() -> tuple[str, int, str]:
    """The (style, version, sha256) recorded with each role-play answer."""
    data = roleplay_metrics()
    return ("roleplay", data["version"], data["sha256"])
