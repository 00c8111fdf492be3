"""A dialogue as the pages show it: the turns as chat bubbles with their emotion ratings, the
judgments of each reply or seeker message (a judgment's `turn`) and unusual finish reasons (the
dialogue and compare pages)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from esc.scoring.judge import VALID
from esc.scoring.rubrics import label
from esc.site.collect import Entry


def bubbles(entry: Entry) -> list[dict[str, Any]]:
    dialogue = entry.dialogue
    if dialogue is None:
        return []
    # (side, k) -> the judgments of the target's k-th reply, or of the seeker's k-th message (a
    # judgment whose `detail` says `message: seeker`, e.g. mode=robustness's adherence answers)
    judged: dict[tuple[str, int], dict[tuple[str, str], list[dict[str, str]]]] = defaultdict(dict)
    for task, judgments in entry.judgments.items():
        for j in judgments:
            if j.turn is not None and len(j.dialogues) == 1:
                side = "seeker" if dict(j.detail).get("message") == "seeker" else "target"
                answer = j.answer if j.status == VALID and j.answer is not None else j.status
                judged[(side, j.turn)].setdefault((task, j.judge), []).append(
                    {"key": j.key, "label": label(j.key), "answer": answer, "status": j.status}
                )
    out = []
    if dialogue.opener:
        out.append(
            {
                "side": "target",
                "who": f"{dialogue.target} (opener)",
                "text": dialogue.opener,
                "exchange": None,
                "emotion": None,
                "judged": [],
                "finish": None,
            }
        )
    exchange = 0
    for i, turn in enumerate(dialogue.turns):
        target = turn.speaker == "target"
        exchange += target
        rated = turn.emotion is not None and (target or i == 0)
        out.append(
            {
                "side": "target" if target else "seeker",
                "who": dialogue.target if target else f"seeker ({dialogue.roleplayer})",
                "text": turn.text,
                "exchange": exchange if target else None,
                "emotion": _emotion(turn.emotion) if rated else None,
                "judged": [
                    {"task": task, "judge": judge, "answers": answers}
                    for (task, judge), answers in judged.get(
                        ("target", exchange) if target else ("seeker", exchange + 1), {}
                    ).items()
                ],
                "finish": turn.finish_reason if turn.finish_reason not in ("stop", "eos", None) else None,
            }
        )
    return out


def _emotion(rating: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A turn's emotion rating with every field a page reads (absent ones None)."""
    if rating is None:
        return None
    return {k: rating.get(k) for k in ("value", "status", "rating", "reason")}
