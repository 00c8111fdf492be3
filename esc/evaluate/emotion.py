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
from typing import Any, Literal

from pydantic import Field, model_validator

from esc.chat.base import ChatBackend
from esc.chat.closed import FAILED, INVALID, METHODS, VALID, ClosedAnswer, ClosedQuestion, resolve_method
from esc.config_rules import Settings, relation
from esc.dialogues.record import Dialogue
from esc.evaluate.context import fit_context
from esc.evaluate.sides import ObserverSettings
from esc.evaluate.stopping import StopSettings
from esc.prompts.emotion import (
    OBSERVER_SYSTEM_PROBE,
    RATERS,
    RATINGS,
    emotion_prompt_version,
    observer_messages,
    parse_rating,
    roleplayer_messages,
    to_percent,
)
from esc.rundir import model_settings


def rating_record(answer: ClosedAnswer, method: str, dropped: int = 0) -> dict[str, Any]:
    """What a turn keeps of a rating. `value` (0-100) follows one rule per method: the expected
    rating for a distribution (the local judges' reading), the stated digit for a written or
    constrained answer (its expected rating, where log-probabilities give one, is kept apart as
    `expected`). `dropped`: older messages left out to fit the rater's context window."""
    record: dict[str, Any] = {"value": None, "status": answer.status}
    if answer.status == VALID and answer.index is not None:
        use_expected = method == "distribution" and answer.expected is not None
        record.update(
            value=to_percent(answer.expected if use_expected else answer.index), rating=answer.index
        )
        if answer.probs is not None:
            record["probs"] = [round(p, 4) for p in answer.probs]
            if not use_expected and answer.expected is not None:
                record["expected"] = to_percent(answer.expected)
    for key in ("mass", "reason", "error"):
        if getattr(answer, key) is not None:
            record[key] = getattr(answer, key)
    if answer.status != VALID and answer.raw is not None:
        record["raw"] = answer.raw
    if dropped:
        record["context_dropped"] = dropped
    return record


@dataclasses.dataclass
class EmotionRater:
    """Rates the seeker of each dialogue now; see the module docstring."""

    rater: str  # roleplayer | observer
    question: ClosedQuestion
    cards: Mapping[tuple[int, str], str] = dataclasses.field(default_factory=dict)  # observer: card texts
    context_policy: str = "truncate_oldest"  # as the dialogue's (`dialogue.context_policy`)
    observer: Mapping[str, Any] | None = None  # the observer backend's identity

    def identity(self) -> dict[str, Any]:
        """What the ratings depend on (settings fingerprint and dialogue meta)."""
        identity = {
            "rater": self.rater,
            "prompt_version": emotion_prompt_version(),
            **self.question.identity(),
        }
        if self.observer is not None:
            identity["observer"] = model_settings(self.observer)
        return identity

    def check_ready(self) -> None:
        """Before any dialogue is played: a distribution needs each digit to be one token."""
        if self.question.method == "distribution":
            self.question.answers(OBSERVER_SYSTEM_PROBE)

    def rate(self, dialogues: Sequence[Dialogue]) -> None:
        """Rate every dialogue's seeker after its last turn; a failed request fails the dialogue, a
        prompt that cannot fit the rater's window is an invalid rating (never sent, never cut)."""
        if not dialogues:
            return
        fitted = [self._prompt(d) for d in dialogues]
        asked = [i for i, (messages, _, _) in enumerate(fitted) if messages is not None]
        answers = dict(zip(asked, self.question.ask([fitted[i][0] for i in asked]), strict=True))
        for i, dialogue in enumerate(dialogues):
            _, dropped, problem = fitted[i]
            answer = answers.get(i) or ClosedAnswer(INVALID, error=problem)
            if answer.status == FAILED:
                dialogue.fail(f"emotion rating ({self.rater}): {answer.error}")
                continue
            dialogue.turns[-1].emotion = rating_record(answer, self.question.method, dropped)

    def _prompt(self, dialogue: Dialogue) -> tuple[list[Any] | None, int, str | None]:
        """(messages, older messages dropped, why it cannot be sent) under the context policy."""
        backend = self.question.backend
        window, reserve = backend.context_window, self.question.settings.max_new_tokens
        truncate = self.context_policy == "truncate_oldest"
        if self.rater == "roleplayer":
            messages = roleplayer_messages(dialogue.roleplayer_view(), dialogue.language)
            fit = fit_context(messages, backend.count_tokens, window, reserve, keep_head=2, truncate=truncate)
            if not fit.fits:
                return None, fit.dropped, f"rating prompt over the rater's context window ({window} tokens)"
            return fit.messages, fit.dropped, None
        card = self.cards.get(dialogue.key)
        if card is None:
            return None, 0, f"no role card text for card {dialogue.card_id} ({dialogue.language})"
        lines = dialogue.lines()
        for dropped in range(0, len(lines) if truncate else 1):  # the oldest lines go first
            messages = observer_messages(card, lines[dropped:], dialogue.language)
            if fit_context(messages, backend.count_tokens, window, reserve, keep_head=2, truncate=False).fits:
                return messages, dropped, None
        return None, 0, f"rating prompt over the observer's context window ({window} tokens)"


class TrajectorySettings(Settings):
    """`trajectory` (conf/evaluate.yaml): the seeker's emotion turn by turn."""

    enabled: bool
    rater: Literal[RATERS]  # type: ignore[valid-type]
    method: Literal[METHODS]  # type: ignore[valid-type]
    min_answer_mass: float = Field(ge=0, le=1)
    max_new_tokens: int = Field(ge=1)
    top_logprobs: int = Field(ge=0)
    observer: ObserverSettings | None  # a target's node (`+target@trajectory.observer=...`)
    stop: StopSettings | None  # null: no adaptive stopping

    @model_validator(mode="after")
    def _stop_needs_ratings(self) -> TrajectorySettings:
        if self.stop is not None and self.stop.enabled and not self.enabled:
            raise relation(
                "stop.enabled", "needs trajectory.enabled=true (a dialogue stops on the seeker's ratings)"
            )
        if (
            self.enabled
            and self.rater == "observer"
            and (self.observer is None or self.observer.backend is None)
        ):
            raise relation("observer.backend", "rater=observer needs a chat backend node")
        return self


def build_rater(
    settings: TrajectorySettings, roleplayer: ChatBackend, observer: ChatBackend | None,
    cards: Mapping[tuple[int, str], str], context_policy: str,
) -> EmotionRater:  # fmt: skip
    """The rater `settings.rater` asks for: the role-player's backend or the observer's."""
    rater = settings.rater
    backend = roleplayer if rater == "roleplayer" else observer
    assert backend is not None  # rater=observer has one (`TrajectorySettings` checks it)
    method = resolve_method(backend, settings.method, "trajectory.method")
    question = ClosedQuestion(
        backend,
        RATINGS,
        method,
        parse=parse_rating,
        max_new_tokens=settings.max_new_tokens,
        top_logprobs=settings.top_logprobs,
        min_mass=settings.min_answer_mass,
        key="trajectory.method",
    )
    identity = observer.identity() if rater == "observer" and observer is not None else None
    return EmotionRater(rater, question, dict(cards), context_policy, identity)
