"""The safety checklist (`safety_checklist.yaml`, see its header): one item per (target reply, question).

For a complete dialogue, the reply of exchange k is judged with the conversation up to and
including it (the opener and every turn before), so a judge sees what the chatbot had been told.
It lives with the scoring because two tasks ask it: mode=safety of every reply, mode=stress of
every reply of the originals and their variants (a task folder imports no other).
Every question is phrased so that "yes" (answer index 0) is the failure. Item ids are
``<dialogue id>#<k>`` (k = 1 for the chatbot's first reply); the dimension is the question's key.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from esc.dialogues.record import Dialogue, dialogue_lines
from esc.hashing import sha256_file
from esc.prompts.registry import checked_question_texts
from esc.prompts.speakers import speaker_lines
from esc.scoring.judge import ScoreItem
from esc.scoring.store import ScoreRecord

CHECKLIST_FILE = Path(__file__).with_name("safety_checklist.yaml")
LANGUAGES = ("en", "zh")
FLAG = 0  # the answer index that flags a reply ("yes")


def load_checklist(path: Path = CHECKLIST_FILE) -> dict[str, Any]:
    """The checklist, checked: a version, the two answers, a prompt and questions in both languages."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    name = Path(path).name
    if not isinstance(data, dict) or not isinstance(data.get("version"), int):
        raise ValueError(f"{name}: needs an integer `version`")
    if data.get("answers") != ["yes", "no"]:
        raise ValueError(f"{name}: answers must be [yes, no] (yes flags the reply)")
    for part in ("system", "user", "speakers"):
        if set(data["prompt"].get(part) or {}) != set(LANGUAGES):
            raise ValueError(f"{name}: prompt.{part} needs exactly the languages {LANGUAGES}")
    keys = [q.get("key") for q in data.get("questions") or []]
    if not keys or len(set(keys)) != len(keys):
        raise ValueError(f"{name}: questions need distinct keys")
    for q in data["questions"]:
        if not all(isinstance(q.get(lang), str) and q[lang] for lang in LANGUAGES) or not q.get("area"):
            raise ValueError(f"{name}: question {q.get('key')!r} needs `area` and a text per language")
    return data


@functools.cache
def checklist() -> dict[str, Any]:
    """The released checklist, its texts checked against their version's checksum (`esc/prompts`)."""
    data = load_checklist(CHECKLIST_FILE)
    return {**data, "sha256": checked_question_texts("safety", data, CHECKLIST_FILE)}


@functools.cache
def _question_texts(language: str) -> dict[str, str]:
    return {q["key"]: q[language] for q in checklist()["questions"]}


def question_keys() -> list[str]:
    return [q["key"] for q in checklist()["questions"]]


def checklist_digest() -> str:
    """What a safety run's settings record of the texts it asked: the file's bytes, so an edited
    comment changes it too and a folder judged before is then not resumed. Its first line still
    names the module's old path (esc/safety/checklist.py) for that reason: leave the bytes alone
    unless the texts change (then bump `version`)."""
    return sha256_file(CHECKLIST_FILE)


def selected_questions(value: Any) -> list[str]:
    """The keys `safety.questions` names (null or "all": every question; a list of known keys,
    each once, checked by `SafetySettings`)."""
    if value in (None, "all"):
        return question_keys()
    return [value] if isinstance(value, str) else list(value)


@dataclasses.dataclass(frozen=True)
class Reply:
    """One reply of the chatbot under test, where the report finds it."""

    item_id: str  # <dialogue id>#<exchange>
    dialogue_id: str
    target: str
    roleplayer: str
    language: str
    card_id: int
    exchange: int  # 1: the chatbot's first reply
    text: str


def replies(dialogue: Dialogue, path: Path, lineno: int) -> list[tuple[Reply, tuple[tuple[str, str], ...]]]:
    """Each reply of a complete dialogue with the lines up to and including it."""
    lines = dialogue_lines(dialogue, path, lineno)
    offset = 1 if dialogue.opener else 0
    dialogue_id = f"{path.stem}/{dialogue.card_id}"
    out = []
    for index, turn in enumerate(dialogue.turns):
        if turn.speaker != "target":
            continue
        exchange = (index + 1) // 2
        reply = Reply(
            f"{dialogue_id}#{exchange}", dialogue_id, dialogue.target, dialogue.roleplayer, dialogue.language,
            dialogue.card_id, exchange, turn.text,
        )  # fmt: skip
        out.append((reply, lines[: offset + index + 1]))
    return out


def safety_items(reply: Reply, lines: Sequence[tuple[str, str]], questions: Sequence[str]) -> list[ScoreItem]:
    """One item per question for `reply`: the prompt given whole, answers yes/no."""
    data = checklist()
    language = reply.language
    names = data["prompt"]["speakers"][language]
    before = speaker_lines(lines[:-1], names["seeker"], names["supporter"])
    items = []
    for key in questions:
        user = (
            data["prompt"]["user"][language]
            .replace("{dialogue}", before)
            .replace("{reply}", reply.text)
            .replace("{question}", _question_texts(language)[key])
        )
        messages = (("system", data["prompt"]["system"][language]), ("user", user))
        items.append(
            ScoreItem(
                reply.item_id,
                key,
                language,
                tuple(lines),
                messages,
                tuple(data["answers"]),
                question=("safety", data["version"], data["sha256"]),
            )
        )
    return items


class SafetyRecord(ScoreRecord):
    """A judgment of one checklist question about one reply: `dimension` is the question's key,
    a valid `score` is 0 ("yes": the reply is flagged) or 1 ("no")."""

    def check(self) -> None:
        if self.dimension not in question_keys():
            raise ValueError(f"unknown safety question {self.dimension!r}")

    def valid_scores(self) -> tuple[int, ...]:
        return (0, 1)
