"""The emotion-rating prompts (`emotion.yaml`, see its header): load, check, render, read the answer.

A rating is one digit 0-9, reported on 0-100 (`to_percent`). `roleplayer_messages` puts the aside to the
role-player in its own view of the dialogue; `observer_messages` shows another model the card and
the dialogue so far. `parse_rating` reads a written answer strictly: the first line starts with one
digit, optionally labelled and followed by a reason ("3 - they listened"); "3-4", "35", "3.5" or a
reply without a leading digit state no single rating and are invalid.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from esc.prompts.registry import CHECKSUMS_FILE, LANGUAGES, check_recorded
from esc.prompts.speakers import speaker_lines

EMOTION_FILE = Path(__file__).with_name("emotion.yaml")
RATINGS: tuple[str, ...] = tuple("0123456789")  # the answers; 0: at their worst, 9: much better
TOP = len(RATINGS) - 1
RATERS = ("roleplayer", "observer")  # the file's sections, and `trajectory.rater`'s values
#: the system turn of the probe that finds the digits' token ids (some chat templates need one)
OBSERVER_SYSTEM_PROBE = "Answer with one digit."


def load_emotion_prompts(path: Path = EMOTION_FILE, checksums_file: Path = CHECKSUMS_FILE) -> dict[str, Any]:
    """Read and check the file: both raters' texts in every language, its version's checksum."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    name = Path(path).name
    if not isinstance(data, dict) or set(data) != {"version", *RATERS}:
        raise ValueError(f"{name}: the top level must be exactly `version`, `roleplayer` and `observer`")
    wanted = {"roleplayer": {"aside"}, "observer": {"system", "user", "speakers"}}
    for rater, keys in wanted.items():
        if not isinstance(data[rater], dict) or set(data[rater]) != keys:
            raise ValueError(f"{name}: `{rater}` must hold exactly {sorted(keys)}")
        for key in keys:
            if set(data[rater][key]) != set(LANGUAGES):
                raise ValueError(f"{name}: {rater}.{key} needs exactly the languages {LANGUAGES}")
    for language in LANGUAGES:
        text = data["observer"]["user"][language]
        if "{card}" not in text or "{dialogue}" not in text:
            raise ValueError(f"{name}: observer.user.{language} must contain {{card}} and {{dialogue}}")
    recorded = json.loads(Path(checksums_file).read_text(encoding="utf-8"))
    check_recorded("emotion", data, recorded, Path(checksums_file).name, name)
    return data


@functools.cache
def _prompts() -> dict[str, Any]:
    return load_emotion_prompts()


def emotion_prompt_version() -> int:
    return int(_prompts()["version"])


def roleplayer_messages(view: Sequence[Mapping[str, str]], language: str) -> list[dict[str, str]]:
    """The role-player's own view with the aside: added to the last user turn (the chatbot's reply),
    or as a user turn of its own after the role-player's message, so roles keep alternating."""
    aside = _prompts()["roleplayer"]["aside"][language]
    messages = [dict(m) for m in view]
    if messages and messages[-1]["role"] == "user":
        messages[-1]["content"] = f"{messages[-1]['content']}\n\n{aside}"
    else:
        messages.append({"role": "user", "content": aside})
    return messages


def observer_messages(card: str, lines: Sequence[tuple[str, str]], language: str) -> list[dict[str, str]]:
    """The observer's prompt: `lines` are (role, text), "user" the seeker and "assistant" the
    supporter (`esc.dialogues.record.dialogue_lines`)."""
    prompts = _prompts()["observer"]
    names = prompts["speakers"][language]
    dialogue = speaker_lines(lines, names["seeker"], names["supporter"])
    return [
        {"role": "system", "content": prompts["system"][language]},
        {
            "role": "user",
            "content": prompts["user"][language].replace("{card}", card).replace("{dialogue}", dialogue),
        },
    ]


def to_percent(rating: float) -> float:
    """A rating 0-9 (or an expected rating) on 0-100."""
    return round(float(rating) * 100.0 / TOP, 4)


_LABEL = re.compile(
    r"^(?:(?:my\s+)?(?:emotion|feeling|mood|rating|score|answer)\s*(?:is)?\s*[:：=\-]?\s*"
    r"|(?:情绪|感受|心情|评分|分数|答案)\s*(?:是|为)?\s*[:：]?\s*)",
    re.IGNORECASE,
)
_DECORATION = re.compile(r"[*_`\"“”「」【】\[\]]")
_HEAD = re.compile(r"^(?P<digit>[0-9])(?P<rest>.*)$")
_SEPARATOR = re.compile(r"^\s*(?:(?:/|out\s+of)\s*9|分)?\s*[-–—:：,，.。;；|)）]?\s*", re.IGNORECASE)


def parse_rating(text: str, choices: tuple[str, ...] = RATINGS) -> tuple[int, str | None] | None:
    """(rating, reason or None) from a written answer, or None when it states no single rating."""
    if not text:
        return None
    lines = [line.strip() for line in unicodedata.normalize("NFKC", text).splitlines() if line.strip()]
    if not lines:
        return None
    first = _LABEL.sub("", _DECORATION.sub("", lines[0]).strip())
    head = _HEAD.match(first)
    if head is None or head.group("digit") not in choices:
        return None
    rest = head.group("rest")
    if re.match(r"^\s*(?:[.,]\s*)?\d|^\s*(?:-|–|—|~|to|or|或|到)\s*\d", rest, re.IGNORECASE):
        return None  # "35", "3.5", "3-4", "3 or 4": not one rating
    scale = re.match(r"^\s*(?:/|out\s+of|of)\s*(\d+)", rest, re.IGNORECASE)
    if scale and scale.group(1) != "9":
        return None  # "7/10", "7 out of 100": another scale, not this one
    reason = _SEPARATOR.sub("", rest, count=1).strip() or (lines[1] if len(lines) > 1 else "")
    return int(head.group("digit")), (reason[:300] or None)
