"""Adaptive stopping (`trajectory.stop.enabled=true`): a dialogue ends when the seeker's emotion
passes a threshold, or after `dialogue.turns` exchanges, whichever comes first.

After each reply of the chatbot under test (from exchange `min_turns` on), the seeker's latest
rating decides: at or above `success` the seeker feels better enough, at or below `failure` the
conversation has failed them; an invalid rating decides nothing. The reason is recorded in
`Dialogue.stop_reason` (`success`, `failure`, or `max_turns` for a dialogue that ran its course).
Off by default: the paper plays a fixed 5 exchanges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from esc.chat.closed import VALID
from esc.config_rules import Settings, relation
from esc.dialogues.record import Dialogue


@dataclasses.dataclass(frozen=True)
class StopRule:
    """The rule of validated `StopSettings` (their ranges and `failure < success` checked there)."""

    success: float  # 0-100: at or above it the seeker feels better enough
    failure: float  # 0-100: at or below it the conversation has failed them
    min_turns: int  # exchanges before any stop

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reason(self, dialogue: Dialogue, exchanges: int) -> str | None:
        """Why `dialogue` ends now, after `exchanges` target replies, or None to go on."""
        if exchanges < self.min_turns or not dialogue.turns or dialogue.turns[-1].speaker != "target":
            return None
        value = valid_value(dialogue.turns[-1].emotion)
        if value is None:
            return None
        if value >= self.success:
            return "success"
        if value <= self.failure:
            return "failure"
        return None


class StopSettings(Settings):
    """`trajectory.stop` (conf/evaluate.yaml)."""

    enabled: bool
    success: float = Field(ge=0, le=100)
    failure: float = Field(ge=0, le=100)
    min_turns: int = Field(ge=1)

    @model_validator(mode="after")
    def _failure_below_success(self) -> StopSettings:
        if not self.failure < self.success:
            raise relation(
                "failure", f"must be below trajectory.stop.success ({self.success:g}), got {self.failure:g}"
            )
        return self

    def rule(self) -> StopRule | None:
        """The stop rule these settings ask for; None when stopping is off."""
        return StopRule(self.success, self.failure, self.min_turns) if self.enabled else None


def valid_value(rating: Mapping[str, Any] | None) -> float | None:
    """The 0-100 value of a valid rating, else None (invalid ratings never count)."""
    if not rating or rating.get("status") != VALID:
        return None
    return rating.get("value")
