"""The leaderboard (paper Table 2): per target and language, each dimension's mean score as
mean/4 x 100 and their average, with bootstrap 95% intervals; a table of the report (markdown,
result.json and leaderboard.csv, `esc.reports.result.write_result`) and PNG charts.

Only valid judgments enter a mean. Each dimension's cell says how many dialogues it rests on, and
the invalid and failed judgments are counted beside it. The average is the mean of the seven
dimension means (as Table 2). Intervals resample role cards, the independent unit, each with all
its dialogues and dimensions (`esc.reports.bootstrap.card_units`): a row that pools several
dialogues of one card (several runs, role-players or simulators) is not made to look surer than its
cards allow. An interval whose resamples are all equal is printed as such, never as a bare [x, x].
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.reports import result as result_
from esc.reports.bootstrap import (
    NO_INTERVAL,
    Interval,
    card_unit_name,
    card_units,
    expand,
    ratio_interval,
    unit_index,
    unit_intervals,
)
from esc.reports.charts import pyplot, save_png
from esc.reports.estimate import Estimate, format_estimate, resampled_units
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import DIMENSION_KEYS, TABLE_2_ORDER, dimension
from esc.scoring.store import ScoreRecord
from esc.tasks.score.metrics import AVERAGE, DIMENSION


@dataclasses.dataclass
class Cell:
    """One score of Table 2: its estimate (0-100, mean score / 4 x 100; n: the valid judgments;
    `left_out`: the invalid and failed judgments it did not average)."""

    estimate: Estimate
    cards: int = 0  # the role cards its valid judgments come from (the resampling unit)

    @property
    def n_invalid(self) -> int:
        return self.estimate.left(INVALID)

    @property
    def n_failed(self) -> int:
        return self.estimate.left(FAILED)


@dataclasses.dataclass
class Row:
    target: str
    roleplayer: str
    language: str
    judge: str
    dialogues: int
    cells: dict[str, Cell]  # dimension key -> cell
    average: Cell
    average_of: tuple[str, ...] = DIMENSION_KEYS  # the dimensions the run judged, which it averages


def _scale(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x / 4 * 100


def leaderboard(records: Iterable[ScoreRecord], n_resamples: int = 1000, seed: int = 0) -> list[Row]:
    """One row per (target, role-player, language, judge) from the latest record of each judgment."""
    groups: dict[tuple[str, str, str, str], list[ScoreRecord]] = defaultdict(list)
    records = list(records)
    for r in records:
        groups[(r.target or "?", r.roleplayer or "?", r.language, r.judge)].append(r)
    # the dimensions the run judged (every row's Average is of the same ones: all seven as Table 2,
    # or a run's `dimensions`, labelled so); a row lacking one of them has no Average
    judged = tuple(k for k in DIMENSION_KEYS if k in {dimension(r.dimension).key for r in records})
    rows = []
    for (target, roleplayer, language, judge), recs in sorted(groups.items()):
        by_dim: dict[str, list[ScoreRecord]] = defaultdict(list)
        for r in recs:
            by_dim[dimension(r.dimension).key].append(r)
        cells = {}
        for key in DIMENSION_KEYS:
            group = by_dim.get(key, [])
            valid = [r for r in group if r.status == VALID]
            scores = [float(r.score) for r in valid]
            interval = (
                ratio_interval(card_units(valid), scores, [1.0] * len(scores), n_resamples, seed)
                if n_resamples > 0 and valid
                else NO_INTERVAL
            )
            cells[key] = _cell(
                float(np.mean(scores)) if valid else None, interval, len(valid), card_units(valid),
                sum(r.status == INVALID for r in group), sum(r.status == FAILED for r in group),
            )  # fmt: skip
        rows.append(
            Row(
                target,
                roleplayer,
                language,
                judge,
                len({r.dialogue_id for r in recs}),
                cells,
                _average(recs, n_resamples, seed, judged),
                judged,
            )  # fmt: skip
        )
    return rows


def _cell(
    mean: float | None, interval: Interval, n_valid: int, units: Sequence[tuple[Any, ...]], n_invalid: int,
    n_failed: int, why_not: str | None = None,
) -> Cell:  # fmt: skip
    """A score (`mean` and `interval` on 0-4) on the 0-100 scale, noting why it is n/a (`why_not`,
    else "no valid judgment") or has no interval where the data say (one card: nothing to resample)."""
    low, high = _bounds(interval)
    cards = len(set(units))
    note = (
        why_not or "no valid judgment"
        if mean is None
        else "one card: nothing to resample"
        if low is None and cards == 1
        else None
    )
    undefined = None if math.isnan(interval.undefined) else interval.undefined
    estimate = Estimate(
        _scale(mean), low, high, n_valid, card_unit_name(units), undefined, note,
        left_out=((INVALID, n_invalid), (FAILED, n_failed)),
    )  # fmt: skip
    return Cell(estimate, cards)


def _bounds(interval: Interval) -> tuple[float | None, float | None]:
    """The interval on the 0-100 scale, None where there is none (fewer than 2 cards, no resamples)."""
    if math.isnan(interval.low) or math.isnan(interval.high):
        return None, None
    return _scale(interval.low), _scale(interval.high)


def _average(
    records: Sequence[ScoreRecord], n_resamples: int, seed: int, judged: Sequence[str] = DIMENSION_KEYS
) -> Cell:
    """The mean of the seven dimension means (of the `judged` ones, where a run judged fewer),
    defined only where each has a valid judgment: a row whose judge never gave a valid Humanoid is
    n/a with that reason, not an average of six printed beside averages of seven. The interval
    resamples cards (all their dialogues and dimensions); a resample that lacks a dimension is
    undefined, counted as such
    (`esc.reports.bootstrap`: above 5% the figure reads "n/a (undefined in k% of resamples)")."""
    dialogues = sorted({r.dialogue_id for r in records})
    judged = tuple(judged)
    table = np.full((len(dialogues), len(judged)), np.nan)
    index = {d: i for i, d in enumerate(dialogues)}
    card_of = {r.dialogue_id: unit for r, unit in zip(records, card_units(records), strict=True)}
    for r in records:
        key = dimension(r.dimension).key
        if r.status == VALID and key in judged:
            table[index[r.dialogue_id], judged.index(key)] = r.score
    n_valid = int(np.sum(~np.isnan(table)))
    n_invalid = sum(r.status == INVALID for r in records)
    n_failed = sum(r.status == FAILED for r in records)

    def mean_of_means(rows: np.ndarray) -> float:
        sub = table[rows.astype(int)]
        if np.any(np.all(np.isnan(sub), axis=0)):
            return float("nan")  # a dimension without a valid judgment: no average of the seven
        return float(np.mean(np.nanmean(sub, axis=0)))

    if n_valid == 0:
        return _cell(None, NO_INTERVAL, 0, [], n_invalid, n_failed)
    lacking = [dimension(k).paper_name for i, k in enumerate(judged) if np.all(np.isnan(table[:, i]))]
    if lacking:
        of = "all seven dimensions" if len(judged) == len(DIMENSION_KEYS) else f"the {len(judged)} judged"
        note = f"no valid {', '.join(lacking)} judgment: the Average is of {of}"
        units = [card_of[d] for d in dialogues]
        return _cell(None, NO_INTERVAL, n_valid, units, n_invalid, n_failed, note)
    value = mean_of_means(np.arange(len(dialogues)))
    units = [card_of[d] for d in dialogues]
    cards, members = unit_index(units)
    interval = (
        unit_intervals(len(cards), lambda drawn: mean_of_means(expand(members, drawn)), n_resamples, seed)[0]
        if n_resamples > 0
        else NO_INTERVAL
    )
    return _cell(value, interval, n_valid, units, n_invalid, n_failed)


def _fmt(cell: Cell, say_why: bool = False) -> result_.Cell:
    """The score as Table 2 shows it: "62.50 [50.0, 75.0]" (an interval of zero width says so);
    `say_why`: an n/a says its reason in the text too (the Average: which dimension it lacks)."""
    text = format_estimate(cell.estimate, 2, interval_digits=1) + no_interval_reason(cell)
    if say_why and cell.estimate.value is None and cell.estimate.note:
        text += f" ({cell.estimate.note})"
    return result_.Cell(text, cell.estimate)


def no_interval_reason(cell: Cell) -> str:
    """Why a cell with a mean has no interval, where the data say: one card is nothing to resample."""
    return " [no interval: one card]" if cell.estimate.low is None and cell.cards == 1 else ""


def average_label(judged: Sequence[str]) -> str:
    """Table 2's Average column: "Average" over the seven, "Average (2 of 7: Empa., Over.)" over a
    run's fewer `dimensions` (never ranked with averages of seven under one name)."""
    if len(judged) == len(DIMENSION_KEYS):
        return "Average"
    return (
        f"Average ({len(judged)} of {len(DIMENSION_KEYS)}: {', '.join(dimension(k).short for k in judged)})"
    )


def leaderboard_blocks(rows: Sequence[Row]) -> list[result_.Block]:
    """Table 2's layout: one row per target and language, 0-100 scores with 95% intervals."""
    names = [dimension(k).paper_name for k in TABLE_2_ORDER]
    judges = sorted({r.judge for r in rows})
    average = average_label(rows[0].average_of if rows else DIMENSION_KEYS)
    several = len(judges) > 1  # a jury, or score files of several judges: one row per judge
    table = result_.Table.of(
        ["Lang", "Target", "Role-player", *(["Judge"] if several else []), *names, average, "n", "invalid",
         "failed"],
        [
            [row.language, row.target, row.roleplayer, *([row.judge] if several else []),
             *(_fmt(row.cells[k]) for k in TABLE_2_ORDER), _fmt(row.average, say_why=True), row.dialogues,
             sum(c.n_invalid for c in row.cells.values()), sum(c.n_failed for c in row.cells.values())]
            for row in sorted(rows, key=lambda r: (r.language, r.target, r.roleplayer, r.judge))
        ],
        csv="leaderboard.csv",
        metrics={**{n: DIMENSION[k] for n, k in zip(names, TABLE_2_ORDER, strict=True)}, average: AVERAGE},
        rank_within=["Lang", *(["Judge"] if several else [])],  # targets compared per language (and judge)
    )  # fmt: skip
    unit = resampled_units(e.unit for e in result_.Report("leaderboard", (table,)).estimates())
    blocks: list[result_.Block] = [
        table,
        result_.Text(
            f"Judge: {', '.join(judges)}. Scores are mean/4 x 100 over valid judgments with bootstrap 95% "
            f"intervals resampled by {unit or 'nothing (no interval)'} (each with all its dialogues); "
            "invalid and failed judgments are counted, never averaged in."
        ),
    ]
    note = one_answer_note(rows)
    if note:
        blocks.append(result_.Text(note))
    return blocks


def one_answer_dimensions(rows: Sequence[Row]) -> dict[str, list[tuple[str, float]]]:
    """Per judge, the dimensions in which every valid judgment of every row has one score (the same
    mean with an interval of zero width everywhere): (dimension key, that score on 0-4). A judge that
    answers the same whatever the dialogue (a 135M base model) measures itself there, not the
    targets, and the report says so beside the numbers."""
    found: dict[str, list[tuple[str, float]]] = {}
    for judge in sorted({r.judge for r in rows}):
        mine = [r for r in rows if r.judge == judge]
        for key in TABLE_2_ORDER:
            cells = [r.cells[key].estimate for r in mine if r.cells[key].estimate.n]
            means = {c.value for c in cells}
            if sum(c.n or 0 for c in cells) >= 2 and len(means) == 1:
                if all(c.n == 1 or c.low == c.high == c.value for c in cells):
                    found.setdefault(judge, []).append((key, float(next(iter(means))) / 100 * 4))
    return found


def one_answer_note(rows: Sequence[Row]) -> str:
    """`one_answer_dimensions` in words, one sentence per judge; "" when there are none."""
    notes = []
    for judge, dims in one_answer_dimensions(rows).items():
        names = ", ".join(f"{dimension(k).paper_name} ({score:g})" for k, score in dims)
        notes.append(
            f"Note: {judge} gave every valid judgment the same score in {len(dims)} of {len(TABLE_2_ORDER)} "
            f"dimensions: {names}. It does not tell these dialogues apart there, so those columns measure "
            "the judge (a small base model, say), not the targets."
        )
    return "\n".join(notes)


def chart_figures(rows: Sequence[Row], label: Callable[[str], str] = str) -> list[tuple[str, str, Any]]:
    """Per language, (language, "radar" | "average", figure): a radar of the seven dimensions (one
    polygon per target, and per judge when several) and a bar chart of the averages with their 95%
    intervals. A mean that reads n/a in the table (undefined, or undefined in more than 5% of its
    resamples: `Estimate.shown`) is a gap in its polygon and no bar, labelled with why ("n/a:
    undefined in 38% of resamples"), never a 0 or a bar of the resamples where it was defined.
    `label` makes a name safe for the backend that draws it (matplotlib's mathtext for SVG)."""
    plt = pyplot()
    several = len({r.judge for r in rows}) > 1  # a jury: each judge's polygon and bar is named
    labels = [dimension(k).paper_name for k in TABLE_2_ORDER]
    angles = np.linspace(0, 2 * np.pi, len(labels), endpoint=False).tolist()
    figures = []
    for language in sorted({r.language for r in rows}):
        group = [r for r in rows if r.language == language]
        fig = plt.figure(figsize=(7, 7))
        ax = fig.add_subplot(polar=True)
        for row in group:
            values = [_or_nan(row.cells[k].estimate.shown()[0]) for k in TABLE_2_ORDER]
            name = f"{row.target} ({row.roleplayer})" + (f" [{row.judge}]" if several else "")
            ax.plot(angles + angles[:1], values + values[:1], label=label(name))
            ax.fill(angles + angles[:1], np.nan_to_num(values + values[:1]), alpha=0.08)
        ax.set_xticks(angles)
        ax.set_xticklabels(labels)
        ax.set_ylim(0, 100)
        ax.set_title(f"ESC-Eval scores ({language}, 0-100)")
        ax.legend(loc="upper right", bbox_to_anchor=(1.35, 1.1), fontsize=8)
        figures.append((language, "radar", fig))

        fig, ax = plt.subplots(figsize=(max(5, 0.7 * len(group) + 2), 4))
        names = [
            label(f"{r.target}\n({r.roleplayer})" + (f"\n[{r.judge}]" if several else "")) for r in group
        ]
        averages = [r.average.estimate for r in group]
        shown = [(i, *e.shown()) for i, e in enumerate(averages)]  # what the table and the CSV show
        drawn = [(i, mean, mean if low is None else low, mean if high is None else high)
                 for i, mean, low, high in shown if mean is not None]  # fmt: skip
        if drawn:
            at, means, lows, highs = (list(c) for c in zip(*drawn, strict=True))
            errors = np.array([np.subtract(means, lows), np.subtract(highs, means)])
            ax.bar(at, means, yerr=errors, capsize=4, color="#4C72B0")
        for i, mean, _, _ in shown:
            if mean is None:  # no bar, and why: never a bar of the resamples where it was defined
                ax.text(i, 2, f"n/a: {averages[i].na_reason()}", ha="center", va="bottom", fontsize=7,
                        rotation=90 if len(group) > 1 else 0)  # fmt: skip
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels(
            names, rotation=45 if len(group) > 6 else 0, ha="right" if len(group) > 6 else "center"
        )
        ax.set_ylim(0, 100)
        ax.set_ylabel("average score (0-100)")
        ax.set_title(f"ESC-Eval average ({language}), 95% bootstrap intervals")
        plt.setp(ax.get_xticklabels(), fontsize=8)
        figures.append((language, "average", fig))
    return figures


def _or_nan(x: float | None) -> float:
    return np.nan if x is None else x


def write_charts(rows: Sequence[Row], out_dir: Path) -> list[Path]:
    """`chart_figures` as PNG files `radar_<lang>.png` and `average_<lang>.png`; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [save_png(fig, out_dir / f"{kind}_{language}.png") for language, kind, fig in chart_figures(rows)]
