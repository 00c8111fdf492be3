"""The adherence questions: did the role-player play its seeker profile? (`adherence.yaml`, see its
header; each hard profile's question in `esc/prompts/seekers.yaml`.)

For a complete dialogue, seeker message k (k = 1 for the seeker's first message) is judged with the
conversation up to and including it (the opener and every turn before), so that a question about a
change of mood ("volatile") can read the message before. Every question is asked so that "yes"
(answer index 0) says the message shows the profile. Item ids are ``<dialogue id>#<k>`` (the
dialogue's `esc.dialogues.record.profiled_id`); the dimension is the profile whose question is asked.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from esc.dialogues.record import Dialogue
from esc.hashing import sha256_file
from esc.prompts.registry import LANGUAGES, checked_question_texts
from esc.prompts.seekers import COOPERATIVE, adherence_question, profile_names
from esc.prompts.speakers import speaker_lines
from esc.scoring.judge import ScoreItem
from esc.scoring.store import ScoreRecord

ADHERENCE_FILE = Path(__file__).with_name("adherence.yaml")
YES = 0  # the answer index that says the message shows the profile


@functools.cache
def adherence_prompt() -> dict[str, Any]:
    """The prompt, checked (two answers, each part in both languages) and against its version's
    checksum (`esc/prompts/checksums.json`: adherence)."""
    data = yaml.safe_load(ADHERENCE_FILE.read_text(encoding="utf-8"))
    name = ADHERENCE_FILE.name
    if data.get("answers") != ["yes", "no"]:
        raise ValueError(f"{name}: answers must be [yes, no] (yes: the message shows the profile)")
    for part in ("system", "user", "speakers"):
        if set(data["prompt"].get(part) or {}) != set(LANGUAGES):
            raise ValueError(f"{name}: prompt.{part} needs exactly the languages {LANGUAGES}")
    return {**data, "sha256": checked_question_texts("adherence", data, ADHERENCE_FILE)}


def adherence_digest() -> str:
    """What a robustness run's settings record of the prompt it asked: the file's bytes."""
    return sha256_file(ADHERENCE_FILE)


def hard_profiles() -> list[str]:
    """The profiles with an adherence question: every one but the cooperative seeker (the baseline)."""
    return [name for name in profile_names() if name != COOPERATIVE]


@dataclasses.dataclass(frozen=True)
class Message:
    """One seeker message of a dialogue, where the report finds it."""

    item_id: str  # <dialogue id>#<k>
    dialogue_id: str
    profile: str  # the profile the dialogue was played with
    target: str
    roleplayer: str
    language: str
    card_id: int
    number: int  # k: 1 for the seeker's first message
    text: str

    @property
    def unit(self) -> tuple[str, str, int]:
        """The role card, as `esc.reports.bootstrap.card_units` names it: the resampling unit."""
        return ("card", self.language, self.card_id)


def seeker_messages(
    dialogue: Dialogue, dialogue_id: str, profile: str, lines: Sequence[tuple[str, str]]
) -> list[tuple[Message, tuple[tuple[str, str], ...]]]:
    """Each seeker message of a complete dialogue (`lines`: its `dialogue_lines`) with the lines up to
    and including it."""
    offset = 1 if dialogue.opener else 0
    out = []
    for index, turn in enumerate(dialogue.turns):
        if turn.speaker != "roleplayer":
            continue
        number = index // 2 + 1
        message = Message(
            f"{dialogue_id}#{number}", dialogue_id, profile, dialogue.target, dialogue.roleplayer,
            dialogue.language, dialogue.card_id, number, turn.text,
        )  # fmt: skip
        out.append((message, tuple(lines[: offset + index + 1])))
    return out


def adherence_item(message: Message, lines: Sequence[tuple[str, str]], profile: str) -> ScoreItem:
    """The item asking `profile`'s question about `message` (`lines`: the conversation up to it):
    the prompt given whole, answers yes/no."""
    data = adherence_prompt()
    language = message.language
    names = data["prompt"]["speakers"][language]
    question = adherence_question(profile, language)
    if question is None:  # a programming error: the cooperative seeker has no question
        raise ValueError(f"the {profile} seeker has no adherence question")
    user = (
        data["prompt"]["user"][language]
        .replace("{dialogue}", speaker_lines(lines[:-1], names["seeker"], names["supporter"]))
        .replace("{message}", message.text)
        .replace("{question}", question)
    )
    messages = (("system", data["prompt"]["system"][language]), ("user", user))
    return ScoreItem(
        message.item_id, profile, language, tuple(lines), messages, tuple(data["answers"]),
        question=("adherence", data["version"], data["sha256"]),
    )  # fmt: skip


class AdherenceRecord(ScoreRecord):
    """A judgment of one profile's adherence question about one seeker message: `dimension` is the
    profile, a valid `score` is 0 ("yes": the message shows the profile) or 1 ("no")."""

    def check(self) -> None:
        if self.dimension not in hard_profiles():
            raise ValueError(f"not a hard seeker profile's question: {self.dimension!r}")

    def valid_scores(self) -> tuple[int, ...]:
        return (0, 1)
