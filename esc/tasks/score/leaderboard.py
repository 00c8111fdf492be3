"""The leaderboard (paper Table 2): per target and language, each dimension's mean score as
mean/4 x 100 and their average, with bootstrap 95% intervals; a table of the report (markdown,
result.json and leaderboard.csv, `esc.reports.result.write_result`) and PNG charts.

Only valid judgments enter a mean. Each dimension's cell says how many dialogues it rests on, and
the invalid and failed judgments are counted beside it. The average is the mean of the seven
dimension means (as Table 2). Intervals resample role cards, the independent unit, each with all
its dialogues and dimensions (`esc.reports.bootstrap.card_units`): a row that pools several
dialogues of one card (several runs, role-players or simulators) is not made to look surer than its
cards allow. An interval whose resamples are all equal is printed as such, never as a bare [x, x].

Which target is better (issue 64): for every two targets scored by the same judge with the same
role-player in the same language, the difference on the Average and on each dimension over the cards
both played, resampled by card (`esc.reports.paired`; each card's value the mean of its dialogues,
each card weighted once); with k targets in a group, each of its k(k-1)/2 intervals is at
1 - 0.05/m (Bonferroni), so that they hold together at 95%. Table 2's "Rank" and its bold read
those paired intervals: a target's rank is 1 + the targets shown ahead of it on the Average (ties
share a rank), and a group's best figure is bold only where its paired interval against every other
target of the group excludes 0. One sentence per pair follows Table 2 (the overview shows it), and
the table "Paired differences" (`paired_differences.csv`) holds every figure.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
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
from esc.reports.chart_spec import Chart
from esc.reports.charts import pyplot, save_png
from esc.reports.estimate import Estimate, format_estimate, resampled_units
from esc.reports.paired import Difference, family_level, marked_best, paired_differences, tied_ranks
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import DIMENSION_KEYS, TABLE_2_ORDER, dimension
from esc.scoring.store import ScoreRecord
from esc.tasks.score.metrics import AVERAGE, DIFFERENCE, DIMENSION


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
    # dimension key -> role card (`card_units`) -> the valid 0-4 scores there (empty: none valid)
    by_card: dict[str, dict[Hashable, list[float]]] = dataclasses.field(default_factory=dict)


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
        by_card: dict[str, dict[Hashable, list[float]]] = defaultdict(dict)
        for r, unit in zip(recs, card_units(recs), strict=True):
            key = dimension(r.dimension).key
            by_dim[key].append(r)
            scores_there = by_card[key].setdefault(unit, [])
            if r.status == VALID:
                scores_there.append(float(r.score))
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
                dict(by_card),
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


AVERAGE_KEY = "average"  # the Average among a pair's measures (beside the dimension keys)
SCALE = 100 / 4  # a 0-4 score on Table 2's 0-100 scale


def card_values(row: Row) -> dict[str, dict[Hashable, list[float]]]:
    """Per measure (each judged dimension's key, then `AVERAGE_KEY`), per role card, the row's valid
    0-4 scores there (several with several dialogues of the card); a card's Average is the mean of its
    judged dimensions' card means, where it has all of them (else none: like Table 2's Average)."""
    out = {k: row.by_card.get(k, {}) for k in row.average_of}
    cards = list(dict.fromkeys(card for k in row.average_of for card in out[k]))
    average: dict[Hashable, list[float]] = {}
    for card in cards:
        means = [float(np.mean(out[k][card])) for k in row.average_of if out[k].get(card)]
        average[card] = [float(np.mean(means))] if len(means) == len(row.average_of) else []
    return {**out, AVERAGE_KEY: average}


@dataclasses.dataclass
class Pair:
    """Two targets scored by the same judge with the same role-player in one language: A - B on each
    measure (`card_values`' keys) over the cards both played, on 0-100; A is the one ahead on the
    Average (by its value); `pairs`: how many pairs its group holds (the Bonferroni family)."""

    language: str
    roleplayer: str
    judge: str
    a: str
    b: str
    differences: dict[str, Difference]
    pairs: int

    @property
    def cards(self) -> int:
        """The cards both played with a value (the Average's, else the most of any measure)."""
        average = self.differences[AVERAGE_KEY].estimate.n or 0
        return average or max((d.estimate.n or 0 for d in self.differences.values()), default=0)


def _group_key(row: Row) -> tuple[str, str, str]:
    return (row.language, row.roleplayer, row.judge)


def paired_rows(rows: Sequence[Row], n_resamples: int = 1000, seed: int = 0) -> list[Pair]:
    """Every two targets of each (language, role-player, judge): their paired differences, resampled
    by card (`esc.reports.paired.paired_differences`, the run's seed), each interval at 1 - 0.05/m for
    the m pairs of the group (`family_level`)."""
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in rows:
        groups[_group_key(row)].append(row)
    out = []
    for (language, roleplayer, judge), members in sorted(groups.items()):
        members = sorted(members, key=lambda r: r.target)
        m = len(members) * (len(members) - 1) // 2
        values = {id(r): card_values(r) for r in members}  # once per target, not once per pair
        for x, y in itertools.combinations(members, 2):
            vx, vy = values[id(x)], values[id(y)]
            point = paired_differences(vx, vy, 0, seed)[AVERAGE_KEY].estimate.value
            if point is not None and point < 0:  # A: the one ahead on the Average
                x, y, vx, vy = y, x, vy, vx
            units = {card for v in (vx, vy) for cards in v.values() for card in cards}
            unit = card_unit_name(units) or "role card"  # what it would resample: none paired
            diffs = paired_differences(vx, vy, n_resamples, seed, family_level(m), unit, SCALE)
            out.append(Pair(language, roleplayer, judge, x.target, y.target, diffs, m))
    return out


def _between(pairs: Sequence[Pair], measure: str) -> dict[tuple[str, str], Difference]:
    return {(p.a, p.b): p.differences[measure] for p in pairs}


def leaderboard_blocks(rows: Sequence[Row], n_resamples: int = 1000, seed: int = 0) -> list[result_.Block]:
    """Table 2's layout: one row per target and language, 0-100 scores with 95% intervals, its rank by
    the Average (ties shared) and its bold (a best figure whose paired intervals exclude 0), then one
    sentence per pair of targets and the table of paired differences (`paired_rows`: `n_resamples`
    and `seed` as `leaderboard`'s)."""
    names = [dimension(k).paper_name for k in TABLE_2_ORDER]
    judges = sorted({r.judge for r in rows})
    average = average_label(rows[0].average_of if rows else DIMENSION_KEYS)
    several = len(judges) > 1  # a jury, or score files of several judges: one row per judge
    pairs = paired_rows(rows, n_resamples, seed)
    by_group: dict[tuple[str, str, str], list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_group[(pair.language, pair.roleplayer, pair.judge)].append(pair)
    ordered = sorted(rows, key=lambda r: (r.language, r.target, r.roleplayer, r.judge))
    ranks: dict[tuple[tuple[str, str, str], str], int | None] = {}
    best: set[tuple[int, str]] = set()
    columns = {**dict(zip(TABLE_2_ORDER, names, strict=True)), AVERAGE_KEY: average}
    for key in {_group_key(r) for r in rows}:
        members = [(i, r) for i, r in enumerate(ordered) if _group_key(r) == key]
        mine = by_group.get(key, [])
        averages = {r.target: r.average.estimate.shown()[0] for _, r in members}
        ranks |= {(key, t): rank for t, rank in tied_ranks(averages, _between(mine, AVERAGE_KEY)).items()}
        for measure, column in columns.items() if mine else ():
            if measure not in mine[0].differences:  # a dimension the run did not judge
                continue
            values = {r.target: _score(r, measure).estimate.shown()[0] for _, r in members}
            winner = marked_best(values, _between(mine, measure))
            best |= {(i, column) for i, r in members if r.target == winner}
    label = ("Target", "Role-player", *(["Judge"] if several else []))
    table = result_.Table.of(
        ["Lang", "Target", "Role-player", *(["Judge"] if several else []), *names, average, "Rank", "n",
         "invalid", "failed"],
        [
            [row.language, row.target, row.roleplayer, *([row.judge] if several else []),
             *(_fmt(row.cells[k]) for k in TABLE_2_ORDER), _fmt(row.average, say_why=True),
             _rank(ranks[(_group_key(row), row.target)]), row.dialogues,
             sum(c.n_invalid for c in row.cells.values()), sum(c.n_failed for c in row.cells.values())]
            for row in ordered
        ],
        csv="leaderboard.csv",
        metrics={**{n: DIMENSION[k] for n, k in zip(names, TABLE_2_ORDER, strict=True)}, average: AVERAGE},
        # targets compared per language, role-player (and judge): the pairs `paired_rows` compares
        rank_within=["Lang", "Role-player", *(["Judge"] if several else [])],
        chart=Chart(
            label=label, values=(*names, average), facet=("Lang",), limits=(0.0, 100.0),
            title=("Scores (0-100), 95% intervals by role card", "得分（0-100），按角色卡的95%区间"),
            axis=("score (0-100)", "得分（0-100）"),
        ),
        best=best,
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
    if pairs:
        blocks += [result_.Text(_ranking_text(pairs)), result_.Text(_sentences(pairs, average, rows))]
        blocks += paired_blocks(pairs, average, several)
    return blocks


def _score(row: Row, measure: str) -> Cell:
    return row.average if measure == AVERAGE_KEY else row.cells[measure]


def _rank(rank: int | None) -> str:
    return "n/a" if rank is None else str(rank)


def _family(pairs: Sequence[Pair]) -> str:
    """How the intervals of a group's pairs hold together, in words."""
    most = max(p.pairs for p in pairs)
    if most == 1:
        return "95% intervals"
    targets = round((1 + math.sqrt(1 + 8 * most)) / 2)  # m = k(k-1)/2 pairs of k targets
    return (
        f"intervals at 1 - 0.05/m for the m pairs of a group (Bonferroni: here up to {targets} targets, "
        f"m = {most}, each at {family_level(most):.1%}), so that all the intervals of a group hold together "
        "at 95%"
    )


def _ranking_text(pairs: Sequence[Pair]) -> str:
    return (
        "Rank: 1 + the number of targets (same language, role-player and judge) ahead on the Average by a "
        "paired difference whose interval excludes 0; targets that cannot be told apart share a rank. "
        "Bold: a group's best figure, only where its paired difference against every other target of the "
        f"group excludes 0 ({_family(pairs)}; without resamples, equal values share a rank and nothing is "
        "bold)."
    )


def _sentence(pair: Pair, average: str) -> str:
    """One pair in words: who is ahead on the Average (by how much, over how many cards, in what share
    of resamples), and the dimensions where that differs."""
    d = pair.differences[AVERAGE_KEY]
    e = d.estimate
    cards = f"{e.n} card{'s' if e.n != 1 else ''}"
    ahead = "" if d.ahead is None else f" ({pair.a} ahead in {d.ahead:.0%} of resamples)"
    if e.shown()[0] is None:
        head = f"{pair.a} and {pair.b}: no paired {average} ({e.why_not() or 'n/a'})"
    elif d.sign > 0:
        head = (
            f"{pair.a} is ahead of {pair.b} by {format_estimate(e, 1)} on the {average} over {cards}{ahead}"
        )
    else:
        head = (
            f"{pair.a} and {pair.b} cannot be told apart on the {average}: {pair.a} - {pair.b} = "
            f"{format_estimate(e, 1)} over {cards}{ahead}"
        )
    outcome = d.sign if e.shown()[0] is not None else None
    said = {1: f"{pair.a} is ahead", -1: f"{pair.b} is ahead", 0: "they cannot be told apart"}
    other: dict[int, list[str]] = defaultdict(list)
    for key in TABLE_2_ORDER:
        if key in pair.differences and pair.differences[key].estimate.shown()[0] is not None:
            sign = pair.differences[key].sign
            if sign != outcome:
                other[sign].append(dimension(key).paper_name)
    tail = "; ".join(
        f"on {', '.join(dims)} {said[sign]}" for sign, dims in sorted(other.items(), reverse=True)
    )
    return f"{head}; {tail}." if tail else f"{head}; likewise on every dimension."


#: a group with more pairs than this (5 targets or more) says in words only each target against the
#: next one in the order of the Average; every pair is in the table "Paired differences"
MAX_SENTENCES = 6


def said_pairs(pairs: Sequence[Pair], rows: Sequence[Row]) -> list[Pair]:
    """The pairs the overview puts in words: every pair of a group of up to `MAX_SENTENCES` pairs; in a
    larger group (14 targets: 91 pairs) each target against its neighbour in the order of Table 2's
    Average (`rows`; a target without one last)."""
    average = {(r.language, r.roleplayer, r.judge, r.target): r.average.estimate.shown()[0] for r in rows}
    groups: dict[tuple[str, str, str], list[Pair]] = defaultdict(list)
    for p in pairs:
        groups[(p.language, p.roleplayer, p.judge)].append(p)
    out = []
    for group in groups.values():
        if len(group) <= MAX_SENTENCES:
            out += group
            continue
        key = (group[0].language, group[0].roleplayer, group[0].judge)
        targets = {t for p in group for t in (p.a, p.b)}
        value = {t: average.get((*key, t)) for t in targets}
        order = sorted(targets, key=lambda t: (value[t] is None, -(value[t] or 0.0), t))
        neighbours = {frozenset(x) for x in itertools.pairwise(order)}
        out += [p for p in group if frozenset((p.a, p.b)) in neighbours]
    return out


def _sentences(pairs: Sequence[Pair], average: str, rows: Sequence[Row]) -> str:
    several = len({(p.language, p.roleplayer, p.judge) for p in pairs}) > 1  # then each says where
    said = said_pairs(pairs, rows)
    lines = [
        f"- {f'{p.language}, role-player {p.roleplayer}, judge {p.judge}: ' if several else ''}"
        f"{_sentence(p, average)}"
        for p in said
    ]
    which = (
        ""
        if len(said) == len(pairs)
        else f" each target against the next one in the order of the {average} ({len(said)} of the "
        f"{len(pairs)} pairs; every pair: the table Paired differences)"
    )
    return (
        f"Which target is better, paired by role card{which} (A - B on the 0-100 scale over the cards both "
        f"played, {_family(pairs)}):\n\n" + "\n".join(lines)
    )


def paired_blocks(pairs: Sequence[Pair], average: str, several: bool) -> list[result_.Block]:
    """The table "Paired differences" (`paired_differences.csv`): per pair, A - B on the Average and
    each dimension, n cards, the share of resamples where A is ahead on the Average; with its forest
    plot (`Chart`, a line at 0)."""
    keys = [k for k in TABLE_2_ORDER if any(k in p.differences for p in pairs)]
    names = [dimension(k).paper_name for k in keys]
    facet = ("Lang", "Role-player", *(["Judge"] if several else []))
    table = result_.Table.of(
        [*facet, "A", "B", average, *names, "cards", "A ahead on the Average"],
        [
            [p.language, p.roleplayer, *([p.judge] if several else []), p.a, p.b,
             *(_difference(p.differences[k], p.a) for k in (AVERAGE_KEY, *keys)), p.cards,
             "n/a" if p.differences[AVERAGE_KEY].ahead is None
             else f"{p.differences[AVERAGE_KEY].ahead:.0%} of resamples"]
            for p in pairs
        ],
        csv="paired_differences.csv",
        name="paired differences",
        metrics=dict.fromkeys([average, *names], DIFFERENCE),
        chart=Chart(
            label=("A", "B"), values=(average, *names), facet=facet, reference=0.0,
            title=("Paired differences A - B (0-100) over the cards both played",
                   "配对差异 A - B（0-100），两者都对话过的角色卡"),
            axis=("A - B (0-100)", "A - B（0-100）"),
        ),
    )  # fmt: skip
    return [
        result_.Heading("Paired differences"),
        result_.Text(
            "A - B for every two targets scored by the same judge with the same role-player in one language, "
            "on the 0-100 scale: the mean over the cards both played of the per-card difference (each "
            "card's value the mean of its dialogues), bootstrap resampled by card, n the cards paired; "
            f"{_family(pairs)}. A is the one ahead on the {average}; a cell's tooltip gives the share of "
            "resamples where A is ahead there."
        ),
        table,
    ]


def _difference(d: Difference, a: str) -> result_.Cell:
    e = d.estimate
    if e.shown()[0] is None:
        return result_.Cell(f"n/a ({e.why_not()})" if e.why_not() else "n/a", e)
    if d.ahead is None:  # nothing resampled: its note says why, where the data say
        return result_.Cell(format_estimate(e, 1), e)
    note = f"{e.n} cards paired; {a} ahead in {d.ahead:.0%} of resamples"
    return result_.Cell(format_estimate(e, 1), dataclasses.replace(e, note=note))


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
