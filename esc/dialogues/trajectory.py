"""The seeker's emotion trajectory of one dialogue, and the figures it gives.

A trajectory is the valid ratings of a dialogue by exchange: exchange 0 is the rating after the
seeker's first message (the start, before any reply of the chatbot), exchange k the rating after
the chatbot's k-th reply. Invalid ratings are left out and counted; they never count as a value.

- start: the rating at exchange 0; final: the rating after the last reply; change: final - start;
- area: the mean emotion over the whole dialogue, the trapezoidal area under the trajectory (over
  the valid points, by exchange; an invalid rating inside is bridged) divided by the exchanges, so
  dialogues of different lengths (adaptive stopping) compare on the same 0-100 scale. It spans the
  whole dialogue, exchange 0 to the last, or it is undefined: a dialogue whose start or final
  rating is invalid has no area (its valid points would cover a shorter span than the others').

A figure whose points are missing (an invalid start or final rating) is None, and reports count
those dialogues apart rather than drop them silently. In a rated dialogue every rating point (the
seeker's first message, each chatbot reply) should carry a rating: one that has none (a hand-edited
or cut file) is counted as missing, and as invalid.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from esc.dialogues.record import Dialogue


@dataclasses.dataclass(frozen=True)
class TrajectoryFigures:
    points: tuple[tuple[int, float], ...]  # (exchange, value 0-100) of the valid ratings
    exchanges: int  # the chatbot's replies
    rated: int  # rating points of a rated dialogue (valid, invalid or missing)
    invalid: int  # those without a valid rating, the missing ones included
    missing: int  # rating points with no rating at all
    start: float | None
    final: float | None
    change: float | None
    area: float | None
    stop_reason: str | None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["points"] = [list(p) for p in self.points]
        return data


def trajectory_figures(dialogue: Dialogue) -> TrajectoryFigures:
    """The figures of `dialogue`'s trajectory (see the module docstring)."""
    points: list[tuple[int, float]] = []
    rated = invalid = missing = 0
    exchange = 0
    any_rating = any(turn.emotion is not None for turn in dialogue.turns)
    for index, turn in enumerate(dialogue.turns):
        if turn.speaker == "target":
            exchange += 1
        if turn.speaker == "roleplayer" and index != 0:
            continue  # ratings follow the seeker's first message and the target's replies only
        if turn.emotion is None:
            if any_rating:  # a rated dialogue with a point left unrated
                rated, invalid, missing = rated + 1, invalid + 1, missing + 1
            continue
        rated += 1
        value = turn.emotion.get("value") if turn.emotion.get("status") == "valid" else None
        if value is None:
            invalid += 1
            continue
        points.append((exchange, float(value)))
    by_exchange = dict(points)
    start = by_exchange.get(0)
    final = by_exchange.get(exchange) if exchange else None
    return TrajectoryFigures(
        tuple(points),
        exchange,
        rated,
        invalid,
        missing,
        start,
        final,
        None if start is None or final is None else round(final - start, 4),
        None if start is None or final is None else _area(points),  # the whole span, or none
        dialogue.stop_reason,
    )


def _area(points: list[tuple[int, float]]) -> float | None:
    if len(points) < 2:
        return None
    total = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False))
    return round(total / (points[-1][0] - points[0][0]), 4)
