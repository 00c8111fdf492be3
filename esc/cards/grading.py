"""The card-grading rules of paper Table 8 (`grading.yaml`): what makes a role card high, middle or
invalid. Card construction prompts with them; annotators grade by them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

GRADING_FILE = Path(__file__).resolve().parent / "grading.yaml"


@functools.cache
def grading() -> dict[str, Any]:
    return yaml.safe_load(GRADING_FILE.read_text(encoding="utf-8"))
