"""`targets/<target>.html`: the report rows that name a target, and its dialogues with every
judgment of them as a whole (a column per task and question), filters, worst first."""

from __future__ import annotations

from collections import Counter
from typing import Any

from esc.dialogues.trajectory import trajectory_figures
from esc.reports.result import Heading, Table
from esc.scoring.judge import VALID
from esc.scoring.rubrics import label
from esc.site.collect import Entry, whole
from esc.site.pages import page
from esc.site.result_html import label_columns, table_html
from esc.site.site import Site, figure


@page("targets", order=20)
def target_pages(site: Site) -> None:
    for group, entries in site.groups.items():
        target_page(site, group, entries)


def target_page(site: Site, group: tuple[str, str], entries: list[Entry]) -> None:
    columns: dict[str, dict[str, None]] = {}  # task -> its keys asked of a whole dialogue, first seen first
    others: dict[str, None] = {}  # tasks with judgments of replies or of pairs
    for entry in entries:
        for task, judgments in entry.judgments.items():
            for j in judgments:
                if whole(j):
                    columns.setdefault(task, {}).setdefault(j.key)
                else:
                    others.setdefault(task)
    rows = []
    for entry in entries:
        topic_key, topic_label = site.topic(entry)
        change = None
        if entry.dialogue is not None and entry.dialogue.trajectory():
            change = trajectory_figures(entry.dialogue).change
        answers = [answer_counts(j for j in entry.judgments.get(task, ()) if not whole(j)) for task in others]
        for judge in site.judges_of(entry):
            groups = [
                {"cells": key_cells(entry, task, judge, keys), "mean": entry.mean(task, judge)}
                for task, keys in columns.items()
            ]
            avg = groups[0]["mean"] if groups else None
            rows.append(
                {
                    "href": "../" + site.page[entry.dialogue_id],
                    "label": f"{entry.language}-{entry.card_id}",
                    "language": entry.language,
                    "card_id": entry.card_id,
                    "topic": topic_key,
                    "topic_label": topic_label,
                    "source": entry.card.source if entry.card else "unknown",
                    "judge": judge,
                    "groups": groups,
                    "avg": avg,
                    "avg_sort": "" if avg is None else f"{avg:.4f}",
                    "missing": entry.dialogue is None,
                    "changed": entry.changed,
                    "answers": answers,
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
        tables=report_rows(site, group),
        columns=[{"task": task, "questions": [label(k) for k in keys]} for task, keys in columns.items()],
        others=list(others),
        rows=rows,
        options=options,
        any_emotion=any(r["change"] is not None for r in rows),
    )


def key_cells(entry: Entry, task: str, judge: str, keys: dict[str, None]) -> list[dict[str, Any]]:
    by_key = {j.key: j for j in entry.whole(task, judge)}
    cells = []
    for key in keys:
        j = by_key.get(key)
        if j is None:
            cells.append({"text": "–", "sort": "", "status": "none"})
        elif j.status == VALID:
            text = j.answer if j.answer is not None else figure(j.score)
            cells.append({"text": text, "sort": "" if j.score is None else str(j.score), "status": VALID})
        else:
            cells.append({"text": j.status, "sort": "", "status": j.status})
    return cells


def answer_counts(judgments: Any) -> str:
    """How often each answer was given ("no 38 · yes 2"), the judgments not read as their status."""
    counts = Counter(j.answer if j.status == VALID and j.answer is not None else j.status for j in judgments)
    return " · ".join(f"{answer} {n}" for answer, n in sorted(counts.items()))


def names_group(table: Table, row: tuple[Any, ...], group: tuple[str, str]) -> bool:
    """Whether a report row is about the target of `group`: a label column whose header says
    target holds its name (or "target (role-player)"), and no role-player column names another."""
    target, roleplayer = group
    labels = [(table.columns[i].casefold(), row[i].text) for i in range(label_columns(table))]
    if any(name == "role-player" and text != roleplayer for name, text in labels):
        return False
    return any("target" in name and text in (target, f"{target} ({roleplayer})") for name, text in labels)


def report_rows(site: Site, group: tuple[str, str]) -> list[dict[str, Any]]:
    """Every report table's rows about the target, a table each, headed by the report and heading."""
    out = []
    for run in site.data.runs:
        for kind, report in run.reports.items():
            heading = None
            for block in report.blocks:
                if isinstance(block, Heading):
                    heading = block.text
                elif isinstance(block, Table):
                    rows = tuple(row for row in block.rows if names_group(block, row, group))
                    if rows:
                        out.append(
                            {
                                "kind": kind,
                                "heading": heading,
                                "href": "../" + site.report_href(run, kind),
                                "table": table_html(Table(block.columns, rows), run.log.metrics()),
                            }
                        )
    return out
