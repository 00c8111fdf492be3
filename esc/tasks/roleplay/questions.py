"""The judge's questions about role-play dialogues: the six metrics (0-2) and the pairwise test.

- `metric_items`: for each role-play dialogue and metric of Table 10, one `ScoreItem` whose
  prompt holds the role card, the conversation and the metric's rule; the answer is "0", "1" or "2".
- `pairwise_items`: for a role-play dialogue and the human dialogue its card was made from
  (Figure 3), two items, one per order (the role-player as A, then as B), "which reads more like a
  real person with that worry?"; the answer is "A" or "B". Asking both orders cancels a judge's
  preference for a position.

Item ids: ``<roleplayer>:<language>:<card id>`` for metrics, with ``:rp_first`` / ``:human_first``
for the pairwise test; ``dimension`` is the metric key, or ``pairwise``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from esc.prompts.speakers import speaker_lines
from esc.scoring.judge import ScoreItem
from esc.scoring.roleplay_metrics import roleplay_metrics, roleplay_question
from esc.scoring.store import ScoreRecord

METRIC_CHOICES = ("0", "1", "2")
PAIR_CHOICES = ("A", "B")
PAIRWISE = "pairwise"
ORDERS = ("rp_first", "human_first")


def metric_keys() -> list[str]:
    return [m["key"] for m in roleplay_metrics()["metrics"]]


def conversation_text(lines: Sequence[tuple[str, str]], language: str) -> str:
    """The conversation as the judge reads it: "Seeker: ..." / "AI assistant: ..." lines; `lines`
    are (role, text) with role "user" for the seeker, "assistant" for the chatbot."""
    names = roleplay_metrics()["prompts"]["speakers"][language]
    return speaker_lines(lines, names["seeker"], names["assistant"])


def metric_items(
    dialogue_id: str, language: str, card: str, lines: Sequence[tuple[str, str]]
) -> list[ScoreItem]:
    """One item per metric for a role-play dialogue."""
    data = roleplay_metrics()
    template = data["prompts"]["metric"][language]
    text = conversation_text(lines, language)
    items = []
    for metric in data["metrics"]:
        levels = "\n".join(f"{k}: {v}" for k, v in sorted(metric["levels"].items()))
        prompt = template.format(
            card=card,
            dialogue=text,
            name=metric["table_name"],
            explanation=metric["explanation"],
            levels=levels,
        )
        items.append(
            ScoreItem(
                dialogue_id,
                metric["key"],
                language,
                tuple(lines),
                (("user", prompt),),
                METRIC_CHOICES,
                question=roleplay_question(),
            )
        )
    return items


def pairwise_items(
    pair_id: str, language: str, roleplay: Sequence[tuple[str, str]], human: Sequence[tuple[str, str]]
) -> list[ScoreItem]:
    """The pairwise question in both orders (see the module docstring)."""
    template = roleplay_metrics()["prompts"]["pairwise"][language]
    rp, hu = conversation_text(roleplay, language), conversation_text(human, language)
    return [
        ScoreItem(
            f"{pair_id}:{order}",
            PAIRWISE,
            language,
            tuple(roleplay),
            (("user", template.format(a=a, b=b)),),
            PAIR_CHOICES,
            question=roleplay_question(),
        )  # fmt: skip
        for order, (a, b) in zip(ORDERS, ((rp, hu), (hu, rp)), strict=True)
    ]


def roleplay_won(order: str, score: int) -> float:
    """1 when the judge picked the role-player's dialogue in this order ("A" is index 0), else 0."""
    return float((score == 0) == (order == "rp_first"))


def seeker_turns(lines: Sequence[tuple[str, str]], turns: int) -> list[tuple[str, str]]:
    """The first `turns` seeker messages of a human dialogue and the replies between them, so that
    it is as long as an ESC-Eval dialogue (5 exchanges)."""
    out: list[tuple[str, str]] = []
    seen = 0
    for role, text in lines:
        if role == "user":
            if seen == turns:
                break
            seen += 1
        out.append((role, text))
    return out


def human_lines(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in record["dialogue"]]


class RoleplayRecord(ScoreRecord):
    """A judgment of a role-play question: `dimension` is a metric key (0-2) or "pairwise" (0: A)."""

    def check(self) -> None:
        if self.dimension not in (*metric_keys(), PAIRWISE):
            raise ValueError(f"unknown role-play question {self.dimension!r}")

    def valid_scores(self) -> tuple[int, ...]:
        return (0, 1) if self.dimension == PAIRWISE else (0, 1, 2)
