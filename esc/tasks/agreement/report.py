"""How well judges agree with people (paper Table 4, and more): per dimension and source, every
row on the same items, every comparison a paired interval.

A table holds rows (judges, then baselines) on one set of annotated items: one dimension, or all
of them pooled, and all sources or one (ESConv, FailedESConv: a judge that only learned which
corpus a dialogue comes from shows it within a source). Each row is read two ways: `argmax` (the
likeliest score) and `expected` (the expected score over the five answers; the score itself where
the judge gave no distribution). Figures:

- ACC and ACC_soft (within one point, as the paper's) over *all* items, an invalid or failed
  judgment counting as wrong, so no judge gains by not answering; the expected score is rounded;
- QWK, MAE, Spearman, Pearson and Kendall over the items that *every* row of the table judged
  validly (`n_common`), so rows are compared on the same items. QWK is the quadratic-weighted
  kappa, 1 - mean((p - h)^2) / (var p + var h + (mean p - mean h)^2): on integer scores exactly
  scikit-learn's `cohen_kappa_score(weights="quadratic")`, on the expected score the same formula
  over the continuous values (Lin's concordance);
- the invalid count and the mean answer mass of the valid judgments (how much of the judge's
  probability fell on "0".."4" at all);
- 95% percentile bootstrap intervals resampling the independent unit (an annotated dialogue with
  all its dimensions; `Item.unit`), with the share of undefined resamples: above 5% the figure is
  "n/a (undefined in k% of resamples)" (`esc.reports.bootstrap`);
- the first row against each other row: the difference of every figure, with a paired interval
  (the same resamples for both rows);
- `Aver.`: the mean over the dimensions that every row of the table covers (the label names how
  many), with its interval from the same resamples.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from esc.reports import result as result_
from esc.reports.bootstrap import (
    NO_INTERVAL,
    Interval,
    estimate,
    expand,
    share_figure,
    unit_index,
    unit_intervals,
)
from esc.reports.chart_spec import Chart
from esc.reports.estimate import Estimate, format_estimate, resampled_units
from esc.reports.metric import Metric
from esc.scoring.rubrics import DIMENSION_KEYS, SCORES, dimension
from esc.tasks.agreement import metrics as agreement_metrics

METRICS = ("acc", "acc_soft", "qwk", "mae", "spearman", "pearson", "kendall")
LABELS = {
    "acc": "ACC",
    "acc_soft": "ACC_soft",
    "qwk": "QWK",
    "mae": "MAE",
    "spearman": "Spearman",
    "pearson": "Pearson",
    "kendall": "Kendall",
}
HEADLINE = ("acc", "acc_soft", "qwk", "spearman")  # the figures of the difference tables
PERCENT = {"acc", "acc_soft"}  # reported x 100, as the paper
ALL_ITEMS = {"acc", "acc_soft"}  # over all items, invalid = wrong; the rest over the common valid items
READINGS = ("argmax", "expected")
AVERAGE = "Aver."  # the mean over dimensions, as Table 4's last row
POOLED = "pooled"  # every dimension's items together
ALL_SOURCES = "all"


# --- the figures ------------------------------------------------------------------------------------


def _acc(pred: np.ndarray, human: np.ndarray) -> float:
    return float(np.mean(_rounded(pred) == human)) if len(pred) else math.nan


def _acc_soft(pred: np.ndarray, human: np.ndarray) -> float:
    return float(np.mean(np.abs(_rounded(pred) - human) <= 1)) if len(pred) else math.nan


def _rounded(pred: np.ndarray) -> np.ndarray:
    """Half up; NaN (no valid judgment) stays NaN, which equals nothing."""
    return np.floor(pred + 0.5)


def qwk(pred: np.ndarray, human: np.ndarray) -> float:
    """Quadratic-weighted kappa; NaN when neither series varies (the ratio is 0/0)."""
    if not len(pred):
        return math.nan
    pred, human = np.asarray(pred, float), np.asarray(human, float)
    chance = pred.var() + human.var() + (pred.mean() - human.mean()) ** 2
    if chance <= 0:
        return math.nan
    return float(1.0 - np.mean((pred - human) ** 2) / chance)


def _mae(pred: np.ndarray, human: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - human))) if len(pred) else math.nan


def _corr(kind: str) -> Callable[[np.ndarray, np.ndarray], float]:
    def corr(pred: np.ndarray, human: np.ndarray) -> float:
        from scipy import stats

        if len(pred) < 2 or np.all(pred == pred[0]) or np.all(human == human[0]):
            return math.nan  # undefined for a constant series
        fn = {"spearman": stats.spearmanr, "pearson": stats.pearsonr, "kendall": stats.kendalltau}[kind]
        return float(fn(pred, human)[0])

    return corr


FUNCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "acc": _acc,
    "acc_soft": _acc_soft,
    "qwk": qwk,
    "mae": _mae,
    "spearman": _corr("spearman"),
    "pearson": _corr("pearson"),
    "kendall": _corr("kendall"),
}


# --- inputs -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One judgment as agreement reads it: None score = invalid, failed or missing."""

    score: int | None = None
    expected: float | None = None  # None: no distribution (the score stands for it)
    answer_mass: float | None = None

    def value(self, reading: str) -> float:
        if self.score is None:
            return math.nan
        if reading == "expected" and self.expected is not None:
            return float(self.expected)
        return float(self.score)


@dataclasses.dataclass(frozen=True)
class Item:
    """One annotated (dialogue, dimension) with its human score."""

    key: tuple[str, str]  # (dialogue id, dimension)
    human: int
    unit: str  # what is resampled: the dialogue (or its input, the role card it was played from)
    source: str | None = None

    @property
    def dimension(self) -> str:
        return self.key[1]


def unit_name(units: Iterable[tuple[str, str]]) -> str:
    """What resampling annotated dialogues by their units draws, in words (an estimate's `unit`), from
    (unit, dialogue id) pairs: "dialogue" where every unit is its dialogue, "input" where none is
    (`Annotation.unit`: the input, else the dialogue), "input, else dialogue" for both."""
    own = {unit == dialogue for unit, dialogue in units}
    return "dialogue" if own <= {True} else "input" if own == {False} else "input, else dialogue"


def majority_baseline(train_scores: Sequence[int]) -> int:
    """The most frequent training score (the higher one on a tie)."""
    counts = Counter(train_scores)
    return max(SCORES, key=lambda s: (counts.get(s, 0), s))


def length_baseline(train_lengths: Sequence[float], train_scores: Sequence[int]) -> Callable[[float], float]:
    """Least-squares line human ≈ a + b·length on the training split, clipped to 0-4 (its argmax
    reading is the line rounded; its expected reading the line itself)."""
    x, y = np.asarray(train_lengths, float), np.asarray(train_scores, float)
    b, a = np.polyfit(x, y, 1) if len(set(x.tolist())) > 1 else (0.0, float(np.mean(y)))
    return lambda length: float(np.clip(a + b * length, 0, 4))


# --- one table ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    judge: str
    reading: str
    values: dict[str, float]
    intervals: dict[str, Interval]
    n: int  # items
    n_common: int  # items every row judged validly: the base of QWK, MAE and the correlations
    n_invalid: int  # of the items, judged invalid or failed (or never judged)
    mean_mass: float | None  # mean answer mass of the valid judgments (None: no distributions)


@dataclasses.dataclass
class Difference:
    judge: str  # the table's first row
    other: str
    reading: str
    metric: str
    value: float
    interval: Interval


@dataclasses.dataclass
class Table:
    scope: str  # a dimension key, AVERAGE or POOLED
    source: str  # ALL_SOURCES or one source
    rows: list[Row]
    differences: list[Difference]
    n_units: int
    dimensions: tuple[str, ...]  # the dimensions the table covers (several for AVERAGE and POOLED)
    of_dimensions: int  # the dimensions of the scope (AVERAGE covers those every row judged)
    unit: str = "dialogue"  # what the intervals resampled (`unit_name`)

    @property
    def label(self) -> str:
        if self.scope in (AVERAGE, POOLED):
            shorts = ", ".join(dimension(d).short for d in self.dimensions)
            return f"{self.scope} ({len(self.dimensions)} of {self.of_dimensions} dim.: {shorts})"
        return dimension(self.scope).short


def _figures(
    items_human: np.ndarray, preds: list[np.ndarray], positions: np.ndarray
) -> list[dict[str, float]]:
    """Every metric of every row on the items at `positions` (the common valid items for the
    valid-item metrics)."""
    human = items_human[positions]
    rows = [p[positions] for p in preds]
    common = np.all([~np.isnan(r) for r in rows], axis=0) if rows else np.zeros(len(human), bool)
    out = []
    for r in rows:
        values = {}
        for metric in METRICS:
            x, y = (r, human) if metric in ALL_ITEMS else (r[common], human[common])
            values[metric] = FUNCTIONS[metric](x, y) if len(x) else math.nan
        out.append(values)
    return out


class _Scope:
    """The items of one table and each row's predictions on them, ready to resample."""

    def __init__(self, items: Sequence[Item], rows: Mapping[str, Mapping[tuple[str, str], Prediction]]):
        self.items = list(items)
        self.names = list(rows)
        self.human = np.array([it.human for it in self.items], dtype=float)
        self.predictions = {
            name: [rows[name].get(it.key, Prediction()) for it in self.items] for name in self.names
        }
        self.units, self.members = unit_index([it.unit for it in self.items])
        self.dims = tuple(d for d in DIMENSION_KEYS if any(it.dimension == d for it in self.items))
        self.by_dim = {d: np.array([it.dimension == d for it in self.items]) for d in self.dims}

    def values(self, reading: str) -> list[np.ndarray]:
        return [np.array([p.value(reading) for p in self.predictions[n]]) for n in self.names]


def _flatten(per_row: list[dict[str, float]], diffs: bool) -> list[float]:
    """Row figures, then (first row - each other row) differences, metric by metric."""
    flat = [row[m] for row in per_row for m in METRICS]
    if diffs:
        flat += [per_row[0][m] - other[m] for other in per_row[1:] for m in METRICS]
    return flat


def agreement_tables(
    items: Sequence[Item],
    rows: Mapping[str, Mapping[tuple[str, str], Prediction]],
    n_resamples: int = 1000,
    seed: int = 0,
    sources: bool = True,
) -> list[Table]:
    """Per source scope (all sources, then each source when there are several): one table per
    dimension, `Aver.` over the dimensions, and every dimension pooled. `rows` is ordered: the
    first row is compared with each other row. A row missing an item counts it as invalid."""
    scopes = [ALL_SOURCES]
    present = sorted({it.source for it in items if it.source})
    if sources and len(present) > 1:
        scopes += present
    tables = []
    for source in scopes:
        chosen = [it for it in items if source == ALL_SOURCES or it.source == source]
        if chosen:
            tables += _scope_tables(_Scope(chosen, rows), source, n_resamples, seed)
    return tables


def _scope_tables(scope: _Scope, source: str, n_resamples: int, seed: int) -> list[Table]:
    names, dims = scope.names, scope.dims
    parts = [(d, np.flatnonzero(scope.by_dim[d])) for d in dims] + [(POOLED, np.arange(len(scope.items)))]
    # Aver. covers the dimensions in which every row judged at least one item validly
    covered = tuple(
        d
        for k, d in enumerate(dims)
        if all(any(scope.predictions[n][i].score is not None for i in parts[k][1]) for n in names)
    )
    averaged = [dims.index(d) for d in covered]
    tables = []
    for reading_index, reading in enumerate(READINGS):
        preds = scope.values(reading)

        def statistic(units: np.ndarray, preds: list[np.ndarray] = preds) -> list[float]:
            chosen = expand(scope.members, units)
            flat: list[float] = []
            per_part = []
            for _, positions in parts:  # the drawn items of each part, drawn multiplicity kept
                figures = _figures(scope.human, preds, chosen[np.isin(chosen, positions)])
                per_part.append(figures)
                flat += _flatten(figures, diffs=True)
            average = [
                {m: float(np.mean([per_part[k][r][m] for k in averaged])) if averaged else math.nan
                 for m in METRICS}
                for r in range(len(names))
            ]  # fmt: skip
            return flat + _flatten(average, diffs=True)

        values = statistic(np.arange(len(scope.units)))
        intervals = unit_intervals(len(scope.units), statistic, n_resamples, seed + reading_index)
        labels = [*(p for p, _ in parts), AVERAGE]
        width = len(names) * len(METRICS) + (len(names) - 1) * len(METRICS)
        for k, label in enumerate(labels):
            chunk = slice(k * width, (k + 1) * width)
            tables.append(
                _table(scope, source, label, reading, values[chunk], intervals[chunk], parts, dims, covered)
            )
    return _merge_readings(tables)


def _table(
    scope: _Scope,
    source: str,
    label: str,
    reading: str,
    values: Sequence[float],
    intervals: Sequence[Interval],
    parts: Sequence[tuple[str, np.ndarray]],
    dims: tuple[str, ...],
    covered: tuple[str, ...],
) -> Table:
    names = scope.names
    if label == AVERAGE:  # its counts are those of the dimensions it averages, not of every one
        positions = np.flatnonzero([it.dimension in covered for it in scope.items])
    else:
        positions = dict(parts)[label]
    predictions = {n: [scope.predictions[n][i] for i in positions] for n in names}
    valid = {n: [p for p in predictions[n] if p.score is not None] for n in names}
    common = sum(1 for i in range(len(positions)) if all(predictions[n][i].score is not None for n in names))
    rows, differences = [], []
    per = len(METRICS)
    for r, name in enumerate(names):
        masses = [p.answer_mass for p in valid[name] if p.answer_mass is not None]
        rows.append(
            Row(
                name,
                reading,
                dict(zip(METRICS, values[r * per : (r + 1) * per], strict=True)),
                dict(zip(METRICS, intervals[r * per : (r + 1) * per], strict=True)),
                len(positions),
                common,
                len(positions) - len(valid[name]),
                float(np.mean(masses)) if masses else None,
            )
        )
    offset = len(names) * per
    for r, other in enumerate(names[1:]):
        for m, metric in enumerate(METRICS):
            k = offset + r * per + m
            differences.append(Difference(names[0], other, reading, metric, values[k], intervals[k]))
    units = {scope.items[i].unit for i in positions}
    named = {AVERAGE: covered, POOLED: dims}.get(label, (label,))
    resampled = unit_name((it.unit, it.key[0]) for it in scope.items)
    return Table(label, source, rows, differences, len(units), named, len(dims), resampled)


def _merge_readings(tables: list[Table]) -> list[Table]:
    """One table per (scope, source) holding both readings' rows and differences."""
    merged: dict[tuple[str, str], Table] = {}
    for t in tables:
        key = (t.scope, t.source)
        if key in merged:
            merged[key].rows += t.rows
            merged[key].differences += t.differences
        else:
            merged[key] = t
    order = {k: i for i, k in enumerate(DIMENSION_KEYS)}
    order.update({AVERAGE: len(order), POOLED: len(order) + 1})
    return sorted(merged.values(), key=lambda t: order.get(t.scope, 99))


# --- reports --------------------------------------------------------------------------------------------


def _text(e: Estimate, metric: str) -> str:
    """A figure as the tables show it: ACC and ACC_soft x 100 with 1 decimal, the rest 3."""
    return format_estimate(e, 1, 100) if metric in PERCENT else format_estimate(e)


def figure_cell(
    value: float, interval: Interval, metric: str, n: int | None = None, unit: str | None = None,
    units: int | None = None,
) -> result_.Cell:  # fmt: skip
    """A figure as its cell (x 100 for ACC), the value unscaled; `unit`: what the interval resampled,
    `units`: how many (an ACC of 0% or 100% then gets the exact 95% interval by unit instead, and by
    item in its note, as the safety and pairwise shares do: every resample agreeing says nothing about
    how sure, `share_figure`)."""
    e = estimate(value, interval, n, unit)
    if metric in PERCENT and value in (0.0, 1.0) and n and units:
        return result_.Cell(*share_figure(e, n, units, "item"))
    return result_.Cell(_text(e, metric), e)


def _row_cell(r: Row, metric: str, t: Table) -> result_.Cell:
    """A row's figure; one over the common valid items says what it left out: the row's own invalid
    items and those another row judged invalidly (ACC and ACC_soft leave none out: invalid = wrong)."""
    n = r.n if metric in ALL_ITEMS else r.n_common
    cell = figure_cell(r.values[metric], r.intervals[metric], metric, n, t.unit, t.n_units)
    if cell.estimate is None or metric in ALL_ITEMS:
        return cell
    left_out = (("invalid", r.n_invalid), ("invalid in another row", r.n - r.n_common - r.n_invalid))
    return result_.Cell(cell.text, dataclasses.replace(cell.estimate, left_out=left_out))


def _signed(d: Difference, unit: str) -> result_.Cell:
    e = estimate(d.value, d.interval, unit=unit)
    text = _text(e, d.metric)
    return result_.Cell(text if text.startswith("n/a") or text.startswith("-") else "+" + text, e)


def source_name(source: str) -> str:
    return {ALL_SOURCES: "all sources"}.get(source, source)


def _mass(r: Row) -> result_.Cell:
    """The mean answer mass of a row's valid judgments (n: those judgments); n/a without distributions."""
    if r.mean_mass is None:
        return result_.Cell("n/a")
    return result_.Cell(f"{r.mean_mass:.3f}", Estimate(r.mean_mass, n=r.n - r.n_invalid))


def row_columns(metrics: Sequence[str]) -> list[str]:
    """The columns of a table of rows (judges and baselines, each reading): the row, `metrics`, counts."""
    return ["Dim.", "Judge", "reading", *(LABELS[m] for m in metrics), "invalid", "mass", "n", "n common"]


def metric_columns(metrics: Sequence[str]) -> dict[str, Metric]:
    """Column header -> the registered metric its figures measure (`esc/tasks/agreement/metrics.py`)."""
    return {LABELS[m]: agreement_metrics.BY_NAME[m] for m in metrics}


def every_figure(tables: Sequence[Table]) -> list[result_.Block]:
    """Every figure of every row and every difference, each source in one table: agreement.csv and
    agreement_differences.csv."""
    rows = [
        [source_name(t.source), t.label, r.judge, r.reading, *(_row_cell(r, m, t) for m in METRICS),
         r.n_invalid, _mass(r), r.n, r.n_common, t.n_units]
        for t in tables
        for r in t.rows
    ]  # fmt: skip
    differences: list[list[result_.CellLike]] = []
    for t in tables:
        for judge, other, reading in dict.fromkeys((d.judge, d.other, d.reading) for d in t.differences):
            got = {
                d.metric: d for d in t.differences if (d.judge, d.other, d.reading) == (judge, other, reading)
            }
            differences.append(
                [
                    source_name(t.source),
                    t.label,
                    judge,
                    other,
                    reading,
                    *(_signed(got[m], t.unit) for m in METRICS),
                ]
            )
    blocks: list[result_.Block] = [
        result_.Heading("All figures"),
        result_.Table.of(
            ["source", *row_columns(METRICS), "units"],
            rows,
            csv="agreement.csv",
            name="all figures",
            metrics=metric_columns(METRICS),
            rank_within=["source", "Dim."],  # the judges (and baselines) compared per dimension
        ),  # fmt: skip
    ]
    if differences:
        blocks += [
            result_.Text("The first row minus each other row, every figure (paired bootstrap):"),
            result_.Table.of(
                ["source", "Dim.", "Judge", "vs", "reading", *(f"Δ{LABELS[m]}" for m in METRICS)],
                differences,
                csv="agreement_differences.csv",
                name="all differences",
            ),
        ]
    return blocks


def agreement_blocks(tables: Sequence[Table], title: str = "", full: bool = True) -> list[result_.Block]:
    """Per source scope: the headline table (ACC, ACC_soft, QWK, Spearman of both readings, every
    row) and the first row's paired differences; then (`full`) every figure and every difference
    (`every_figure`)."""
    unit = resampled_units(t.unit for t in tables)  # what the intervals resampled, from the tables
    blocks: list[result_.Block] = [result_.Heading(title, level=1)] if title else []
    for source in dict.fromkeys(t.source for t in tables):
        scoped = [t for t in tables if t.source == source]
        blocks += [
            result_.Heading(source_name(source)),
            result_.Table.of(
                row_columns(HEADLINE),
                [
                    [
                        t.label,
                        r.judge,
                        r.reading,
                        *(_row_cell(r, m, t) for m in HEADLINE),
                        f"{r.n_invalid} ({r.n_invalid / r.n:.0%})" if r.n else "0",
                        "n/a" if r.mean_mass is None else f"{r.mean_mass:.3f}",
                        r.n,
                        r.n_common,
                    ]
                    for t in scoped
                    for r in t.rows
                ],
                name=source_name(source),
                metrics=metric_columns(HEADLINE),
                rank_within=["Dim."],
                chart=Chart(
                    label=("Judge", "reading"),
                    values=(LABELS["qwk"],),
                    panel="Dim.",
                    reference=0.0,
                    title=(
                        f"Each judge's agreement with people per dimension ({source_name(source)})",
                        f"各评委与人工评分的一致性（按维度，{source_name(source)}）",
                    ),
                    axis=("quadratic-weighted kappa (QWK)", "二次加权 kappa（QWK）"),
                ),
            ),  # fmt: skip
        ]
        diffs = [(t, d) for t in scoped for d in t.differences if d.metric in HEADLINE]
        if diffs:
            first = diffs[0][1].judge
            rows: list[list[result_.CellLike]] = []
            for t in scoped:
                for other in dict.fromkeys(d.other for d in t.differences):
                    for reading in READINGS:
                        got = {
                            d.metric: d for d in t.differences if d.other == other and d.reading == reading
                        }
                        if got:
                            cells = [_signed(got[m], t.unit) for m in HEADLINE]
                            rows.append([t.label, other, reading, *cells])
            blocks += [
                result_.Text(
                    f"{first} minus each other row, paired bootstrap by {unit} (the same resamples for "
                    "both rows):"
                ),
                result_.Table.of(
                    ["Dim.", "vs", "reading", *(f"Δ{LABELS[m]}" for m in HEADLINE)],
                    rows,
                    name=f"{source_name(source)}: {first} minus each other row",
                ),
            ]
    if full:
        blocks += every_figure(tables)
    blocks.append(
        result_.Text(
            "ACC and ACC_soft (within 1) in %, over all items (an invalid judgment counts as wrong; the "
            "expected score rounded half up); QWK (quadratic-weighted kappa; on the expected score the same "
            "formula over continuous values), MAE and the correlations over the items every row judged "
            f"validly (n common). [95% percentile bootstrap interval, resampled by {unit}]; n/a "
            "(undefined in k% of resamples) where a figure is undefined in more than 5% of them. mass: "
            f"mean probability on the five answers, valid judgments. {AVERAGE}: mean over the dimensions "
            f"named; {POOLED}: all their items together."
        )
    )
    return blocks


def find_row(tables: Sequence[Table], scope: str, judge: str, reading: str, source: str = ALL_SOURCES) -> Row:
    """The row of `judge` in the table of (`scope`, `source`)."""
    for t in tables:
        if t.scope == scope and t.source == source:
            for r in t.rows:
                if r.judge == judge and r.reading == reading:
                    return r
    raise KeyError((scope, source, judge, reading))


__all__ = [
    "ALL_SOURCES",
    "AVERAGE",
    "METRICS",
    "NO_INTERVAL",
    "POOLED",
    "READINGS",
    "Item",
    "Prediction",
    "Table",
    "agreement_tables",
    "find_row",
    "length_baseline",
    "majority_baseline",
    "qwk",
    "agreement_blocks",
    "every_figure",
]
