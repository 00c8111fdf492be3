"""`dialogues/<target>/<lang>-<card id>.html`: the transcript, every judgment with its probabilities,
the emotion trajectory, safety answers and pairwise verdicts."""

from __future__ import annotations

from typing import Any

from esc.dialogues.trajectory import trajectory_figures
from esc.scoring.judge import VALID
from esc.scoring.rubrics import dimension
from esc.site.collect import Entry
from esc.site.pages import page
from esc.site.site import LOW_MASS, Site
from esc.site.transcript import bubbles
from esc.tasks.score.leaderboard import TABLE_ORDER


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
        bubbles=bubbles(entry),
        judgments=judgments(entry),
        low_mass=LOW_MASS,
        trajectory=trajectory(entry),
        safety=safety(site, entry),
        pairwise=pairwise(site, entry),
    )


def judgments(entry: Entry) -> list[dict[str, Any]]:
    out = []
    for judge in sorted(entry.scores):
        rows = []
        for key in TABLE_ORDER:
            r = entry.scores[judge].get(key)
            if r is None:
                continue
            probs = [{"score": i, "p": p, "pct": f"{100 * p:.1f}"} for i, p in enumerate(r.probs or [])]
            rows.append(
                {
                    "key": key,
                    "name": dimension(key).paper_name,
                    "status": r.status,
                    "score": r.score,
                    "expected": r.expected,
                    "mass": r.answer_mass,
                    "low_mass": r.status == VALID and below(r.answer_mass, LOW_MASS),
                    "probs": probs,
                    "raw": r.raw,
                    "error": r.error,
                }
            )
        avg = entry.average(judge)
        out.append({"judge": judge, "rows": rows, "average": avg})
    return out


def trajectory(entry: Entry) -> dict[str, Any] | None:
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


def safety(site: Site, entry: Entry) -> list[dict[str, Any]]:
    out = []
    for judge, by_exchange in sorted(entry.safety.items()):
        keys = [k for k in site.questions if any(k in a for a in by_exchange.values())]
        rows = []
        for exchange in sorted(by_exchange):
            cells = []
            for key in keys:
                r = by_exchange[exchange].get(key)
                if r is None:
                    cells.append({"text": "–", "cls": "none", "title": ""})
                elif r.status == VALID:
                    cells.append(
                        {
                            "text": "yes" if r.score == 0 else "no",
                            "cls": "flag" if r.score == 0 else "ok",
                            "title": "",
                        }
                    )
                else:
                    cells.append({"text": r.status, "cls": r.status, "title": r.error or r.raw or ""})
            rows.append({"exchange": exchange, "cells": cells})
        lang = entry.language if entry.language in ("en", "zh") else "en"
        questions = [
            {"key": k, "text": site.questions[k].get(lang, k), "area": site.questions[k].get("area")}
            for k in keys
        ]
        out.append({"judge": judge, "questions": questions, "rows": rows})
    return out


def pairwise(site: Site, entry: Entry) -> list[dict[str, Any]]:
    out = []
    order = {k: i for i, k in enumerate(TABLE_ORDER)}
    for v in sorted(entry.pairwise, key=lambda v: (v.judge, v.opponent, order.get(v.dimension, 99))):
        other = site.by_pair_key.get((entry.roleplayer, entry.language, entry.card_id, v.opponent))
        answers = []
        for o in ("xy", "yx"):
            r = v.answers.get(o)
            first = v.shown_first[o]
            second = v.shown_first["yx" if o == "xy" else "xy"]
            if r is None:
                text = "not judged"
            elif r.status != VALID:
                text = f"{r.status}" + (f" ({r.error})" if r.error else "")
            else:
                text = {0: first, 1: second, 2: "neither"}.get(r.score, "?")
            answers.append({"first": first, "text": text, "raw": r.raw if r is not None else None})
        out.append(
            {
                "judge": v.judge,
                "dimension": dimension(v.dimension).paper_name,
                "opponent": v.opponent,
                "href": "../../" + site.page[other] if other else None,
                "result": v.result or "unread",
                "consistent": v.consistent,
                "answers": answers,
            }
        )
    return out


def below(value: float | None, bound: float) -> bool:
    return value is not None and value < bound
