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

from esc.dialogues.record import Dialogue
from esc.errors import ConfigError
from esc.interact.emotion import valid_value


@dataclasses.dataclass(frozen=True)
class StopRule:
    success: float = 85.0  # 0-100: a stated 8 or 9, or an expected digit >= 7.65, is a success
    failure: float = 15.0  # 0-100: a stated 0 or 1, or an expected digit <= 1.35, is a failure
    min_turns: int = 1  # exchanges before any stop

    def __post_init__(self) -> None:
        if not 0 <= self.failure < self.success <= 100:
            raise ConfigError(
                "trajectory.stop",
                f"needs 0 <= failure < success <= 100, got {self.failure} and {self.success}",
            )
        if self.min_turns < 1:
            raise ConfigError("trajectory.stop.min_turns", f"must be at least 1, got {self.min_turns}")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> StopRule:
        return cls(float(cfg.get("success", 85)), float(cfg.get("failure", 15)), int(cfg.get("min_turns", 1)))

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
