"""`dialogues/<target>/<lang>-<card id>.html`: the transcript with the judgments of each reply beside
it, every judgment of the dialogue by task (judge, question, answer, probabilities, the other
dialogues of a pair), and the seeker's emotion as evaluate.py rated it."""

from __future__ import annotations

from typing import Any

from esc.dialogues.trajectory import trajectory_figures
from esc.reports.runlog import Judgment
from esc.scoring.judge import VALID
from esc.scoring.rubrics import label
from esc.site.collect import Entry, whole
from esc.site.pages import page
from esc.site.site import Site
from esc.site.transcript import bubbles


@page("dialogues", order=30)
def dialogue_pages(site: Site) -> None:
    for entry in site.data.entries.values():
        dialogue_page(site, entry)


def dialogue_page(site: Site, entry: Entry) -> None:
    topic_key, topic_label = site.topic(entry)
    dialogue = entry.dialogue
    compare = site.compare.get((entry.language, entry.card_id)) if entry.card_id is not None else None
    site.write(
        site.page[entry.dialogue_id],
        "dialogue",
        "dialogues",
        page_title=f"{entry.target}: {entry.language}-{entry.card_id}",
        page_lang="zh" if entry.language == "zh" else "en",
        entry=entry,
        dialogue=dialogue,
        topic=topic_label,
        topic_key=topic_key,
        source=entry.card.source if entry.card else "unknown",
        card_text=entry.card.to_text() if entry.card else None,
        target_href="../../" + (site.group_href(entry.group) or ""),
        compare_href="../../" + compare if compare else None,
        original_href=_original_href(site, entry),
        bubbles=bubbles(entry),
        tasks=[task_judgments(site, entry, task, judgments) for task, judgments in entry.judgments.items()],
        low_mass=site.low_mass,
        emotion=emotion(entry),
    )


def _original_href(site: Site, entry: Entry) -> str | None:
    """The page of the dialogue a stress-test variant was made from, where the site shows it."""
    original = (entry.dialogue.meta or {}).get("derived_from") if entry.variant and entry.dialogue else None
    return "../../" + site.page[original] if original in site.page else None


def task_judgments(site: Site, entry: Entry, task: str, judgments: list[Judgment]) -> dict[str, Any]:
    """One task's judgments of the dialogue, by judge, then those of the whole dialogue, then by
    reply; the mean score of each judge's judgments of the whole dialogue."""
    ordered = sorted(judgments, key=lambda j: (j.judge, j.turn is not None, j.turn or 0))
    judges = dict.fromkeys(j.judge for j in ordered if whole(j))
    return {
        "task": task,
        "rows": [judgment_row(site, entry, j) for j in ordered],
        "means": [(judge, entry.mean(task, judge)) for judge in judges],
        "judges": len({j.judge for j in judgments}),
        "any_turn": any(j.turn is not None for j in judgments),
        "beside": entry.dialogue is not None and all(j.turn is not None for j in judgments),
        "any_other": any(len(j.dialogues) > 1 for j in judgments),
        "any_probs": any(j.probs for j in judgments),
    }


def judgment_row(site: Site, entry: Entry, j: Judgment) -> dict[str, Any]:
    others = []
    for d in j.dialogues:
        if d != entry.dialogue_id:
            other = site.data.entries.get(d)
            others.append(
                {"label": other.target if other else d, "href": "../../" + site.page[d] if other else None}
            )
    return {
        "judge": j.judge,
        "key": j.key,
        "label": label(j.key),
        "turn": j.turn,
        "status": j.status,
        "answer": j.answer,
        "judgment": j,
        "expected": j.expected,
        "mass": j.answer_mass,
        "low_mass": j.status == VALID and j.answer_mass is not None and j.answer_mass < site.low_mass,
        "probs": [{"i": i, "pct": f"{100 * p:.1f}"} for i, p in enumerate(j.probs or ())],
        "others": others,
        "detail": [f"{k}: {v}" for k, v in j.detail],
        "raw": j.raw,
        "error": j.error,
    }


def emotion(entry: Entry) -> dict[str, Any] | None:
    """The seeker's emotion after each reply (evaluate.py's ratings, kept with the turns) as an SVG
    line's coordinates."""
    if entry.dialogue is None or not entry.dialogue.trajectory():
        return None
    fig = trajectory_figures(entry.dialogue)
    width, height, pad = 380, 160, 34
    span = max(fig.exchanges, 1)

    def x(ex: float) -> float:
        return round(pad + ex / span * (width - 2 * pad), 1)

    def y(v: float) -> float:
        return round(height - pad - v / 100 * (height - 2 * pad), 1)

    return {
        "width": width,
        "height": height,
        "points": " ".join(f"{x(e)},{y(v)}" for e, v in fig.points),
        "dots": [{"x": x(e), "y": y(v), "exchange": e, "value": v} for e, v in fig.points],
        "xticks": [{"x": x(e), "label": e} for e in range(0, fig.exchanges + 1)],
        "yticks": [{"y": y(v), "label": v} for v in (0, 50, 100)],
        "left": pad,
        "right": width - pad,
        "bottom": height - pad,
        "top": pad,
        "figures": fig,
    }
