"""The 7 dimensions, the judge prompts that score them, and the human annotation rules.

All texts live in `rubrics.yaml` next to this file (sources and versions are documented there).
Each style is versioned as every question file is (`esc.prompts.registry.checked_question_texts`):
`esc/prompts/checksums.json` holds the sha256 of each released version's texts, a style whose
texts changed without a new version does not load, and every judgment records the style, version
and sha256 it was asked with (`PromptStyle.identity`), so a rerun re-judges what an older text
judged.
A dialogue is scored one dimension at a time: `PromptStyle.messages` renders the chat a judge sees
for one (dialogue, dimension) pair in a prompt style (`official`: the ESC-Eval score.py prompts the
released ESC-RANK adapters were trained on; `paper`: Figures 12-19, the GPT-4 / InternLM2 prompts of
Table 4).

A style without a system text of its own (`official`) sends the system turn the judge model's own
`chat()` adds when its caller gives none (`model.chat_default_system`: InternLM2's
`meta_instruction`, which score.py's `model.chat(tokenizer, prompt, history=[])` puts before the
user turn); a model whose chat template already adds its default (Qwen, SmolLM2) needs none.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from esc.chat.base import Message
from esc.errors import UserError
from esc.prompts.registry import checked_question_texts

RUBRICS_FILE = Path(__file__).with_name("rubrics.yaml")
LANGUAGES = ("en", "zh")
SCORES = (0, 1, 2, 3, 4)
ASSISTANT = "AI assistant："  # official-format speaker prefixes (esc/official_formats/dialogues.py)
USER = "ESC-Role："


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One row of the one table of dimensions (`rubrics.yaml` `dimensions`): data files hold `key`,
    and every view a person reads shows `paper_name` (`label`)."""

    key: str  # canonical: fluency, diversity, empathy, suggestion, humanoid, skill, overall
    paper_name: str  # Table 2's column name
    short: str  # Table 4's row label
    zh: str  # the Chinese label (rating pages, the export's dataset card)
    official_key: str  # score.py's key and ESC-RANK's adapter folder name
    aliases: tuple[str, ...]


@functools.cache
def _data() -> dict[str, Any]:
    return yaml.safe_load(RUBRICS_FILE.read_text(encoding="utf-8"))


@functools.cache
def dimensions() -> tuple[Dimension, ...]:
    """The 7 dimensions in the paper's order."""
    return tuple(
        Dimension(key, d["paper_name"], d["short"], d["zh"], d["official_key"], tuple(d.get("aliases") or ()))
        for key, d in _data()["dimensions"].items()
    )


DIMENSION_KEYS: tuple[str, ...] = tuple(d.key for d in dimensions())
#: Table 2's column order (Skillful before Humanoid, unlike the order the paper defines them in)
TABLE_2_ORDER: tuple[str, ...] = tuple(_data()["table_2_columns"])
if sorted(TABLE_2_ORDER) != sorted(DIMENSION_KEYS):
    raise ValueError(f"{RUBRICS_FILE}: table_2_columns must hold each dimension key once")


def label(key: str) -> str:
    """What a person reads for a judgment's or a column's key: a dimension's paper name (`diversity`
    reads Expression); any other key (a checklist question, a role-play metric) as it is."""
    for d in dimensions():
        if key == d.key:
            return d.paper_name
    return key


def labelled_counts(counts: Mapping[str, int]) -> str:
    """Counts by dimension key as a console line says them: "Expression 2, Overall 1" (none: "none")."""
    return ", ".join(f"{label(k)} {n}" for k, n in counts.items() if n) or "none"


def dimension(name: str, where: str = "dimension") -> Dimension:
    """The dimension called `name`: its key, paper name, official key or an alias (any case)."""
    wanted = str(name).strip().lower()
    for d in dimensions():
        if wanted in {d.key, d.paper_name.lower(), d.official_key, *(a.lower() for a in d.aliases)}:
            return d
    raise UserError(f"{where}: unknown dimension {name!r}; known: {', '.join(DIMENSION_KEYS)}")


@dataclasses.dataclass(frozen=True)
class PromptStyle:
    name: str
    version: int
    system: str | None
    user: str  # with {rubric}, {dialogue}, {phrase}
    phrases: Mapping[str, str]  # dimension key -> how the last sentence names it
    rubrics: Mapping[str, Mapping[str, str]]  # language -> dimension key -> rubric
    sha256: str = ""  # of its texts and the dialogue format (checksums.json)

    @property
    def identity(self) -> dict[str, Any]:
        """What a judgment records of the prompt it was asked with."""
        return {"style": self.name, "version": self.version, "sha256": self.sha256}

    def messages(
        self, dimension_key: str, dialogue_text: str, language: str, default_system: str | None = None
    ) -> list[Message]:
        """The chat for one (dialogue, dimension): the style's system text, else `default_system`
        (the judge model's `chat()` default, see the module docstring), then the user turn."""
        if language not in self.rubrics:
            raise UserError(f"prompt style {self.name!r} has no {language!r} rubrics")
        user = self.user.format(
            rubric=self.rubrics[language][dimension_key],
            dialogue=dialogue_text.strip(),
            phrase=self.phrases[dimension_key],
        )
        messages: list[Message] = []
        system = self.system or default_system
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": user})
        return messages


def prompt_style_names() -> list[str]:
    """The prompt styles of rubrics.yaml (what a judge's `prompt` may name)."""
    return sorted(_data()["styles"])


@functools.cache
def prompt_style(name: str) -> PromptStyle:
    """The style `name`, one of `prompt_style_names` (a judge's `prompt`, checked by its settings)."""
    s = _data()["styles"][name]
    texts = {**s, "dialogue_format": _data()["dialogue_format"]}
    sha256 = checked_question_texts(f"rubrics.{name}", texts, RUBRICS_FILE)
    return PromptStyle(
        name, int(s["version"]), s.get("system"), s["user"], s["phrases"], s["rubrics"], sha256
    )


def dialogue_text(lines: Sequence[tuple[str, str]]) -> str:
    """A dialogue as the judge prompts show it, from (role, text) pairs, role "assistant" or "user".

    As score.py does: official-format lines ("AI assistant：...", "ESC-Role：...") joined by blank
    lines, then "AI assistant" -> "**AI助手**" and "ESC-Role：" -> "**用户**".
    """
    fmt = _data()["dialogue_format"]
    prefix = {"assistant": ASSISTANT, "user": USER}
    text = fmt["separator"].join(prefix[role] + content for role, content in lines)
    for old, new in fmt["replace"]:
        text = text.replace(old, new)
    return text


def annotation_rules() -> dict[str, Any]:
    """Paper Table 16: per dimension, what annotators focus on and what each score 0-4 means."""
    return dict(_data()["annotation_rules"])
