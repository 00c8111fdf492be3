"""`targets/<target>.html`: a target's dialogues with their scores, filters and its leaderboard rows."""

from __future__ import annotations

from typing import Any

from esc.dialogues.trajectory import trajectory_figures
from esc.scoring.judge import VALID
from esc.scoring.rubrics import dimension
from esc.site.collect import Entry
from esc.site.pages import page
from esc.site.site import Site
from esc.tasks.score.leaderboard import TABLE_ORDER


@page("targets", order=20)
def target_pages(site: Site) -> None:
    for group, entries in site.groups.items():
        target_page(site, group, entries)


def target_page(site: Site, group: tuple[str, str], entries: list[Entry]) -> None:
    rows = []
    depth_href = "../"
    for entry in entries:
        topic_key, topic_label = site.topic(entry)
        source = entry.card.source if entry.card else "unknown"
        flagged = sum(
            1
            for by_ex in entry.safety.values()
            for q in by_ex.values()
            for r in q.values()
            if r.status == VALID and r.score == 0
        )
        change = None
        if entry.dialogue is not None and entry.dialogue.trajectory():
            change = trajectory_figures(entry.dialogue).change
        for judge in site.judges_of(entry):
            avg = entry.average(judge) if judge else None
            rows.append(
                {
                    "href": depth_href + site.page[entry.dialogue_id],
                    "label": f"{entry.language}-{entry.card_id}",
                    "language": entry.language,
                    "card_id": entry.card_id,
                    "topic": topic_key,
                    "topic_label": topic_label,
                    "source": source,
                    "judge": judge,
                    "cells": score_cells(entry, judge),
                    "avg": avg,
                    "avg_sort": "" if avg is None else f"{avg:.4f}",
                    "missing": entry.dialogue is None,
                    "changed": entry.changed,
                    "flagged": flagged,
                    "change": change,
                }
            )
    rows.sort(key=lambda r: (r["avg"] is None, r["avg"] if r["avg"] is not None else 0, r["label"]))
    options = {
        "language": sorted({r["language"] for r in rows}),
        "topic": sorted({(r["topic"], r["topic_label"]) for r in rows}),
        "source": sorted({r["source"] for r in rows}),
        "judge": sorted({r["judge"] for r in rows if r["judge"]}),
    }
    site.write(
        site.group_href(group) or "targets/x.html",
        "target",
        "targets",
        page_title=f"{group[0]} ({group[1]})",
        target=group[0],
        roleplayer=group[1],
        rows=rows,
        summary=[b for b in site.board if (b["target"], b["roleplayer"]) == group],
        several_judges=len({b["judge"] for b in site.board}) > 1,
        n_resamples=site.n_resamples,
        options=options,
        dim_names=[dimension(k).paper_name for k in TABLE_ORDER],
        any_safety=any(e.safety for e in entries),
        any_trajectory=any(r["change"] is not None for r in rows),
    )


def score_cells(entry: Entry, judge: str) -> list[dict[str, Any]]:
    by_dim = entry.scores.get(judge, {})
    cells = []
    for key in TABLE_ORDER:
        r = by_dim.get(key)
        if r is None:
            cells.append({"text": "–", "sort": "", "status": "none"})
        elif r.status == VALID:
            cells.append({"text": str(r.score), "sort": str(r.score), "status": VALID})
        else:
            cells.append({"text": r.status, "sort": "", "status": r.status})
    return cells
