"""The seeker's emotion, rated while the dialogue is played (`trajectory.enabled=true`).

After the seeker's first message (the start) and after every reply of the chatbot under test, a
rater says how the seeker feels, 0-100 (`esc/prompts/emotion.yaml`), stored on the turn it follows
(`Turn.emotion`):

- ``rater: roleplayer``: the role-player itself, in character, in a side request that never enters
  the dialogue (its own view of the dialogue plus the aside, on its own backend and adapter);
- ``rater: observer``: another chat model reading the role card and the dialogue so far.

The answer is read as any closed question is (`esc.chat.closed`): the expected rating from the
next-token distribution for a local model, a constrained digit on vLLM, a strictly parsed reply
(with its reason) from an API. An invalid answer is recorded with its reply and never counts; a
failed request fails the dialogue, so a rerun plays it again (a trajectory has no holes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from esc.chat.base import ChatBackend
from esc.chat.closed import FAILED, INVALID, VALID, ClosedAnswer, ClosedQuestion, resolve_method
from esc.dialogues.record import Dialogue
from esc.errors import ConfigError
from esc.prompts.emotion import (
    RATINGS,
    emotion_prompt_version,
    observer_messages,
    parse_rating,
    roleplayer_messages,
    to_percent,
)

RATERS = ("roleplayer", "observer")


def rating_record(answer: ClosedAnswer) -> dict[str, Any]:
    """What a turn keeps of a rating: the value 0-100 (from the expected rating where the
    probabilities are known, else the stated one), how it was read, and why it is invalid."""
    record: dict[str, Any] = {"value": None, "status": answer.status}
    if answer.status == VALID and answer.index is not None:
        rating = answer.expected if answer.expected is not None else answer.index
        record.update(value=to_percent(rating), rating=answer.index)
        if answer.probs is not None:
            record["probs"] = [round(p, 4) for p in answer.probs]
    for key in ("mass", "reason", "error"):
        if getattr(answer, key) is not None:
            record[key] = getattr(answer, key)
    if answer.status != VALID and answer.raw is not None:
        record["raw"] = answer.raw
    return record


@dataclasses.dataclass
class EmotionRater:
    """Rates the seeker of each dialogue now; see the module docstring."""

    rater: str  # roleplayer | observer
    question: ClosedQuestion
    cards: Mapping[tuple[int, str], str] = dataclasses.field(default_factory=dict)  # observer: card texts

    def identity(self) -> dict[str, Any]:
        """What the ratings depend on (settings fingerprint and dialogue meta)."""
        return {"rater": self.rater, "prompt_version": emotion_prompt_version(), **self.question.identity()}

    def rate(self, dialogues: Sequence[Dialogue]) -> None:
        """Rate every dialogue's seeker after its last turn; a failed request fails the dialogue."""
        if not dialogues:
            return
        answers = self.question.ask([self._prompt(d) for d in dialogues])
        for dialogue, answer in zip(dialogues, answers, strict=True):
            if answer.status == FAILED:
                dialogue.fail(f"emotion rating ({self.rater}): {answer.error}")
                continue
            dialogue.turns[-1].emotion = rating_record(answer)

    def _prompt(self, dialogue: Dialogue) -> list[Any]:
        if self.rater == "roleplayer":
            return roleplayer_messages(dialogue.roleplayer_view(), dialogue.language)
        card = self.cards.get(dialogue.key)
        if card is None:
            raise ConfigError(
                "trajectory.rater", f"no role card text for card {dialogue.card_id} ({dialogue.language})"
            )
        return observer_messages(card, dialogue.lines(), dialogue.language)


def build_rater(
    cfg: Mapping[str, Any], roleplayer: ChatBackend, observer: ChatBackend | None,
    cards: Mapping[tuple[int, str], str],
) -> EmotionRater:  # fmt: skip
    """The rater a `trajectory` node asks for: the role-player's backend or the observer's."""
    rater = cfg.get("rater", "roleplayer")
    if rater not in RATERS:
        raise ConfigError("trajectory.rater", f"must be one of {', '.join(RATERS)}, got {rater!r}")
    backend = roleplayer if rater == "roleplayer" else observer
    if backend is None:
        raise ConfigError("trajectory.observer.backend", "rater=observer needs the observer's chat backend")
    method = resolve_method(backend, cfg.get("method", "auto"), "trajectory.method")
    question = ClosedQuestion(
        backend,
        RATINGS,
        method,
        parse=parse_rating,
        max_new_tokens=int(cfg.get("max_new_tokens", 48)),
        top_logprobs=int(cfg.get("top_logprobs", 0)),
        min_mass=float(cfg.get("min_answer_mass", 0.0)),
    )
    return EmotionRater(rater, question, dict(cards))


def valid_value(rating: Mapping[str, Any] | None) -> float | None:
    """The 0-100 value of a valid rating, else None (invalid ratings never count)."""
    if not rating or rating.get("status") != VALID:
        return None
    return rating.get("value")


__all__ = ["INVALID", "RATERS", "VALID", "EmotionRater", "build_rater", "rating_record", "valid_value"]
