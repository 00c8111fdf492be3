"""The pairwise question (`pairwise.yaml`, see its header): two chatbots on one card, one dimension.

For each role-player, each card two or more targets played with it, each pair of those targets
(named in sorted order, x before y) and each dimension: two items, one per order (`xy`: x's
conversation is A; `yx`: y's is A). The answer is "A", "B" or "C" (neither is better); `verdict`
turns the two answers into the pair's result: the same result both ways stands; two different
results are a tie, counted as position-inconsistent; an unread answer leaves it undefined (counted,
never a result). Item ids: ``<role-player>/<language>/<card id>/<x>|<y>/<order>``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from esc.dialogues.record import Dialogue
from esc.hashing import sha256_file
from esc.prompts.registry import checked_question_texts
from esc.prompts.speakers import speaker_lines
from esc.scoring.judge import VALID, ScoreItem
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord

PAIRWISE_FILE = Path(__file__).with_name("pairwise.yaml")
ORDERS = ("xy", "yx")
TIE = "tie"


@functools.cache
def pairwise_prompts() -> dict[str, Any]:
    data = yaml.safe_load(PAIRWISE_FILE.read_text(encoding="utf-8"))
    if data.get("answers") != ["A", "B", "C"] or set(data["criteria"]) != set(DIMENSION_KEYS):
        raise ValueError(f"{PAIRWISE_FILE.name}: answers must be [A, B, C] and criteria every dimension")
    return {**data, "sha256": checked_question_texts("pairwise", data, PAIRWISE_FILE)}


def pairwise_digest() -> str:
    """What a pairwise run's settings record of the texts it asked."""
    return sha256_file(PAIRWISE_FILE)


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two targets' dialogues of one card, played by one role-player."""

    roleplayer: str
    language: str
    card_id: int
    x: str  # the targets, sorted
    y: str
    dialogue_x: Dialogue
    dialogue_y: Dialogue

    @property
    def pair_id(self) -> str:
        return f"{self.roleplayer}/{self.language}/{self.card_id}/{self.x}|{self.y}"

    @property
    def unit(self) -> tuple[int, str]:
        return (self.card_id, self.language)


def pairs(dialogues: Sequence[Dialogue]) -> list[Pair]:
    """Every pair of targets that played the same card with the same role-player (complete dialogues)."""
    by_card: dict[tuple[str, str, int], dict[str, Dialogue]] = {}
    for d in dialogues:
        if d.status == "complete":
            by_card.setdefault((d.roleplayer, d.language, d.card_id), {})[d.target] = d
    found = []
    for (roleplayer, language, card), targets in sorted(by_card.items()):
        for x, y in itertools.combinations(sorted(targets), 2):
            found.append(Pair(roleplayer, language, card, x, y, targets[x], targets[y]))
    return found


def _conversation(dialogue: Dialogue) -> str:
    names = pairwise_prompts()["prompt"]["speakers"][dialogue.language]
    return speaker_lines(dialogue.lines(), names["seeker"], names["supporter"])


def pair_items(pair: Pair, dimensions: Sequence[str]) -> list[ScoreItem]:
    """Both orders of `pair` for each dimension."""
    data = pairwise_prompts()
    language = pair.language
    texts = {"xy": (_conversation(pair.dialogue_x), _conversation(pair.dialogue_y))}
    texts["yx"] = texts["xy"][::-1]
    lines = tuple(pair.dialogue_x.lines()) + tuple(pair.dialogue_y.lines())
    items = []
    for key in dimensions:
        criterion = data["criteria"][key][language]
        name = criterion.split(":", 1)[0].split("：", 1)[0]
        for order in ORDERS:
            a, b = texts[order]
            user = (
                data["prompt"]["user"][language]
                .replace("{a}", a)
                .replace("{b}", b)
                .replace("{criterion}", criterion)
                .replace("{name}", name)
            )
            messages = (("system", data["prompt"]["system"][language]), ("user", user))
            items.append(
                ScoreItem(
                    f"{pair.pair_id}/{order}",
                    key,
                    language,
                    lines,
                    messages,
                    tuple(data["answers"]),
                    question=("pairwise", data["version"], data["sha256"]),
                )
            )
    return items


def winner(order: str, answer: int, x: str, y: str) -> str:
    """The target an answer prefers in an order (0: A, 1: B, 2: neither), or TIE."""
    if answer == 2:
        return TIE
    first, second = (x, y) if order == "xy" else (y, x)
    return first if answer == 0 else second


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A pair's result on one dimension from its two answers."""

    result: str | None  # x, y, TIE, or None (an answer unread)
    consistent: bool | None  # both orders agreed; None when an answer is unread
    first_position: int  # of the two answers, how many chose the conversation shown first (A)
    decisive: int  # of the two answers, how many chose A or B


def verdict(pair: Pair, answers: Mapping[str, ScoreRecord | None]) -> Verdict:
    """The pair's result from its `xy` and `yx` records (see the module docstring)."""
    read = {o: r.score for o, r in answers.items() if r is not None and r.status == VALID}
    first = sum(score == 0 for score in read.values())
    decisive = sum(score in (0, 1) for score in read.values())
    if len(read) < 2:
        return Verdict(None, None, first, decisive)
    results = {winner(o, s, pair.x, pair.y) for o, s in read.items()}
    if len(results) == 1:
        return Verdict(results.pop(), True, first, decisive)
    return Verdict(TIE, False, first, decisive)


class PairwiseRecord(ScoreRecord):
    """A judgment of a pairwise item: `dimension` a dimension key, a valid `score` 0 (A), 1 (B) or 2
    (neither)."""

    def valid_scores(self) -> tuple[int, ...]:
        return (0, 1, 2)
