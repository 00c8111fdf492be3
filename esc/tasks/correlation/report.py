"""How well automatic metrics follow human scores (paper Tables 3, 13, 14 and 15).

Rows are metrics, each one number per dialogue: the text metrics of `esc.tasks.correlation.textmetrics` on the
supporter's ("assistant") turns, and, per judge in the score files, `ESC-<dimension>` (its valid score
on that dimension, by the dimension's paper name: Table 14's rows, which the paper names by score.py's
keys, `ESC-tech` for ESC-Skillful) and `ESC-Eval` (the mean of its valid scores over the dimensions,
Table 3's row and Table 14's "Average" row). Columns are the human-scored dimensions (the annotators'
median, `human_reference`) and `Average`, the mean human score over the dimensions a dialogue has.

The paper's design is N inputs x M systems (20 ESConv situations, each talked through with 5
chatbots): every dialogue has an `input` (its role card or situation) and a `system` (the chatbot).
- sample level: for each input, the correlation of metric and human score across its systems'
  dialogues, then the mean over inputs (an input whose correlation is undefined -- fewer than 3
  dialogues, or constant scores -- is counted and named, and left out of the mean);
- dataset level: the correlation over all (input, system) dialogues pooled.
Spearman, Pearson and Kendall's tau-b (scipy.stats), each with a 95% percentile bootstrap interval
resampling inputs (the dialogues of one input are not independent), and the share of undefined
resamples: above 5% the figure is n/a (`esc.reports.bootstrap`).

Every row of a column is computed on the same dialogues: those every computed row has a value for,
with the column's human score. A judge trained by `train.py +exp=train/esc_rank` is never correlated on the
dialogues it learned from (`trained_on.json` beside its adapters): they leave every row.

Reference-based metrics (BLEU, ROUGE-L, METEOR) need references: a JSONL file with one line per
dialogue, `{"dialogue_id": ..., "references": ["...", ...]}`. A row whose metric has no reference for
some dialogues limits every row to the dialogues that have one; a row with none at all is reported
as not computed, with the reason; nothing is invented.

    python rank.py mode=correlation correlation.scores=[RANK_OUT] correlation.references=FILE
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.annotate.human_scores import Annotation, human_reference
from esc.errors import DataError
from esc.jsonl import read_jsonl
from esc.reports import result as result_
from esc.reports.bootstrap import NO_INTERVAL, Interval, estimate, expand, unit_index, unit_intervals
from esc.reports.estimate import Estimate, format_estimate
from esc.scoring.judge import VALID
from esc.scoring.rubrics import DIMENSION_KEYS, dimension, label
from esc.scoring.store import ScoreRecord, score_file_paths
from esc.tasks.correlation.metrics import BY_STATISTIC
from esc.tasks.correlation.textmetrics import METRICS as TEXT_METRICS

log = logging.getLogger(__name__)

STATISTICS = ("spearman", "pearson", "kendall")
LABELS = {"spearman": "Spear.", "pearson": "Pear.", "kendall": "Kend."}
AVERAGE = "average"
LEVELS = ("sample", "dataset")
MIN_POINTS = 3


# --- statistics -----------------------------------------------------------------------------------


def _statistics(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[Spearman, Pearson, Kendall tau-b]; NaN where undefined (a constant series)."""
    from scipy import stats

    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return np.full(3, np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array(
            [stats.spearmanr(x, y)[0], stats.pearsonr(x, y)[0], stats.kendalltau(x, y)[0]], dtype=float
        )


@dataclasses.dataclass
class Correlation:
    """Each statistic's estimate on the same dialogues (value NaN: undefined; n: the dialogues; note:
    why the values are n/a, or which inputs were left out of the mean), and the inputs they come
    from (the resampled unit)."""

    estimates: dict[str, Estimate]
    inputs: int = 0

    @property
    def n(self) -> int:
        return self.estimates[STATISTICS[0]].n or 0

    @property
    def note(self) -> str | None:
        return self.estimates[STATISTICS[0]].note


def _correlation(
    n: int, values: Sequence[float], intervals: Sequence[Interval], inputs: int, note: str | None = None,
    unit: str = "input",
) -> Correlation:  # fmt: skip
    figures = zip(STATISTICS, values, intervals, strict=True)
    return Correlation({s: estimate(float(v), i, n, unit, note) for s, v, i in figures}, inputs)


def _undefined(n: int, why: str, inputs: int = 0) -> Correlation:
    return _correlation(n, [math.nan] * len(STATISTICS), [NO_INTERVAL] * len(STATISTICS), inputs, why)


def _pairs(metric: Sequence[float], human: Sequence[float], inputs: Sequence[str] | None):
    x, y = np.asarray(metric, dtype=float), np.asarray(human, dtype=float)
    units = list(inputs) if inputs is not None else [str(i) for i in range(len(x))]
    keep = ~(np.isnan(x) | np.isnan(y))
    return x[keep], y[keep], [u for u, k in zip(units, keep, strict=True) if k]


def correlate(
    metric: Sequence[float],
    human: Sequence[float],
    n_resamples: int = 1000,
    seed: int = 0,
    inputs: Sequence[str] | None = None,
) -> Correlation:
    """Dataset level: Spearman, Pearson and Kendall over all pairs (NaN pairs dropped), with
    bootstrap intervals resampling `inputs` (None: every pair its own input)."""
    x, y, units = _pairs(metric, human, inputs)
    names, members = unit_index(units)
    if len(x) < MIN_POINTS:
        return _undefined(len(x), f"fewer than {MIN_POINTS} pairs", len(names))
    for series, name in ((x, "metric"), (y, "human score")):
        if np.all(series == series[0]):
            return _undefined(len(x), f"constant {name}", len(names))

    def statistic(drawn: np.ndarray) -> np.ndarray:
        rows = expand(members, drawn)
        return _statistics(x[rows], y[rows])

    values = statistic(np.arange(len(names)))
    intervals = unit_intervals(len(names), statistic, n_resamples, seed)
    return _correlation(
        len(x), values, intervals, len(names), unit="input" if inputs is not None else "dialogue"
    )


def correlate_within_inputs(
    metric: Sequence[float],
    human: Sequence[float],
    inputs: Sequence[str],
    n_resamples: int = 1000,
    seed: int = 0,
) -> Correlation:
    """Sample level: per input, the correlation across its dialogues (its systems); the mean over
    the inputs where it is defined, with the undefined ones counted; inputs resampled."""
    x, y, units = _pairs(metric, human, inputs)
    names, members = unit_index(units)
    if not names:
        return _undefined(0, "no pairs")
    per_input = np.array([_statistics(x[m], y[m]) if len(m) >= MIN_POINTS else [np.nan] * 3 for m in members])
    defined = ~np.isnan(per_input[:, 0])
    undefined = len(names) - int(defined.sum())
    if not defined.any():
        most = max(len(m) for m in members)
        why = (
            f"every input has fewer than {MIN_POINTS} dialogues (at most {most}): nothing to correlate "
            "within an input"
            if most < MIN_POINTS
            else f"undefined for all {len(names)} inputs (constant scores within each)"
        )
        return _undefined(len(x), why, len(names))

    def statistic(drawn: np.ndarray) -> np.ndarray:
        chosen = per_input[drawn]
        chosen = chosen[~np.isnan(chosen[:, 0])]
        return chosen.mean(axis=0) if len(chosen) else np.full(3, np.nan)

    values = statistic(np.arange(len(names)))
    intervals = unit_intervals(len(names), statistic, n_resamples, seed)
    note = (
        f"undefined for {undefined} of {len(names)} inputs (fewer than {MIN_POINTS} dialogues or constant "
        "scores): the mean is over the other inputs"
        if undefined
        else None
    )
    return _correlation(len(x), values, intervals, len(names), note)


# --- inputs ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Item:
    """One annotated dialogue: the supporter's turns, the human score per dimension, and where it
    sits in the inputs x systems design."""

    dialogue_id: str
    language: str
    turns: tuple[str, ...]  # the "assistant" turns, the hypothesis of the text metrics
    human: dict[str, float]  # dimension key -> human score (annotators' median)
    annotation: Annotation  # the first one
    input: str  # the role card / situation (the resampled unit); default: the dialogue itself
    system: str | None  # the chatbot; None: one system

    def human_score(self, column: str) -> float:
        if column == AVERAGE:
            return float(np.mean(list(self.human.values())))
        return self.human.get(column, math.nan)


def load_items(annotations: Sequence[Annotation], records: Sequence[ScoreRecord] = ()) -> list[Item]:
    """One item per annotated dialogue. Its input and system: the annotation's `input` and
    `system`, else the score records' role card and target, else the dialogue and one system."""
    reference = human_reference(annotations)
    from_records: dict[str, ScoreRecord] = {}
    for record in records:
        from_records.setdefault(record.dialogue_id, record)
    items: dict[str, Item] = {}
    for ann in annotations:
        if ann.dialogue_id not in items:
            turns = tuple(text for role, text in ann.lines if role == "assistant")
            record = from_records.get(ann.dialogue_id)
            card = f"{record.language}:{record.card_id}" if record and record.card_id is not None else None
            items[ann.dialogue_id] = Item(
                ann.dialogue_id,
                ann.language,
                turns,
                {},
                ann,
                ann.input or card or ann.dialogue_id,
                ann.system or (record.target if record else None),
            )
        items[ann.dialogue_id].human[ann.dimension] = float(reference[(ann.dialogue_id, ann.dimension)])
    return list(items.values())


def read_references(path: Path) -> dict[str, list[str]]:
    """dialogue id -> reference texts, from `{"dialogue_id": ..., "references": [...]}` lines."""
    path = Path(path)  # an existing file (`correlation.references`, checked by its settings)
    out: dict[str, list[str]] = {}
    lines: dict[str, int] = {}
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        if not isinstance(record, dict) or "dialogue_id" not in record or "references" not in record:
            raise DataError(path, where, 'expected {"dialogue_id": ..., "references": ["...", ...]}')
        refs = record["references"]
        refs = [refs] if isinstance(refs, str) else refs
        if not isinstance(refs, list) or not refs or not all(isinstance(r, str) and r.strip() for r in refs):
            raise DataError(path, where, "`references` must be a non-empty list of non-empty texts")
        key = str(record["dialogue_id"])
        if key in out:
            raise DataError(path, where, f"dialogue {key!r} again (first on line {lines[key]})")
        out[key], lines[key] = refs, lineno
    if not out:
        raise DataError(path, None, "no references (empty file)")
    return out


def score_paths(spec: str | Sequence[str] | None) -> list[Path]:
    """Score files from files or rank.py output folders (their `scores/*.jsonl`); none without spec."""
    return score_file_paths(spec, "correlation.scores") if spec else []


# --- metric values per dialogue --------------------------------------------------------------------


@dataclasses.dataclass
class Metric:
    """One row: a value per dialogue (missing: left out), or the reason it was not computed."""

    label: str
    values: dict[str, float]
    reason: str | None = None  # not computed at all
    note: str | None = None  # computed, on part of the dialogues


def text_metrics(
    items: Sequence[Item], names: Sequence[str], references: Mapping[str, list[str]] | None
) -> list[Metric]:
    rows = []
    with_refs = [it for it in items if references and it.dialogue_id in references]
    for name in names:
        spec = TEXT_METRICS[name]
        if not spec.needs_reference:
            log.info("Computing %s on %d dialogues", spec.label, len(items))
            values = {it.dialogue_id: spec.fn(it.turns, (), it.language) for it in items}
            rows.append(Metric(spec.label, values))
            continue
        if references is None:
            why = "no references file (correlation.references); the annotated dialogues have no reference"
            rows.append(Metric(spec.label, {}, reason=why))
            continue
        if not with_refs:
            rows.append(Metric(spec.label, {}, reason="no annotated dialogue has a reference"))
            continue
        log.info("Computing %s on %d dialogues with references", spec.label, len(with_refs))
        values = {
            it.dialogue_id: spec.fn(it.turns, references[it.dialogue_id], it.language) for it in with_refs
        }
        note = None
        if len(with_refs) < len(items):
            note = f"references for {len(with_refs)} of {len(items)} annotated dialogues; the rest left out"
        rows.append(Metric(spec.label, values, note=note))
    return rows


def judge_metrics(records: Iterable[ScoreRecord], items: Sequence[Item]) -> tuple[list[Metric], list[str]]:
    """Per judge, `ESC-<dimension>` rows and `ESC-Eval` (mean of its valid scores), on annotated
    dialogues; and warnings about judged dialogues no annotation knows."""
    known = {it.dialogue_id for it in items}
    by_judge: dict[str, dict[tuple[str, str], ScoreRecord]] = defaultdict(dict)
    for record in records:
        by_judge[record.judge][record.key] = record  # a later line supersedes an earlier one
    rows, warns = [], []
    for judge, latest in by_judge.items():
        judged = {d for d, _ in latest}
        unknown = sorted(judged - known)
        if unknown:
            warns.append(
                f"judge {judge}: {len(unknown)} of {len(judged)} judged dialogues match no annotation "
                f"(e.g. {', '.join(unknown[:3])}); left out"
            )
        valid: dict[str, dict[str, float]] = defaultdict(dict)
        for (dialogue_id, dim), record in latest.items():
            if record.status == VALID and dialogue_id in known:
                valid[dialogue_id][dim] = float(record.score)
        suffix = f" ({judge})" if len(by_judge) > 1 else ""
        dims = [d for d in DIMENSION_KEYS if any(dim == d for _, dim in latest)]
        for dim in dims:
            values = {i: s[dim] for i, s in valid.items() if dim in s}
            rows.append(_judge_row(f"ESC-{label(dim)}{suffix}", values, judge))
        means = {i: float(np.mean(list(s.values()))) for i, s in valid.items() if s}
        rows.append(_judge_row(f"ESC-Eval{suffix}", means, judge))
    return rows, warns


def _judge_row(label: str, values: dict[str, float], judge: str) -> Metric:
    reason = None if values else f"no valid judgment by {judge} on an annotated dialogue"
    return Metric(label, values, reason=reason)


# --- the analysis ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Cell:
    level: str
    metric: str
    column: str  # dimension key or AVERAGE
    result: Correlation


def common_dialogues(items: Sequence[Item], metrics: Sequence[Metric]) -> list[Item]:
    """The items every computed row has a value for: all rows of a column share them."""
    computed = [m for m in metrics if not m.reason]
    return [
        it for it in items if all(not math.isnan(m.values.get(it.dialogue_id, math.nan)) for m in computed)
    ]


def analyse(
    items: Sequence[Item], metrics: Sequence[Metric], n_resamples: int = 1000, seed: int = 0
) -> list[Cell]:
    """Every computed metric against every human column, at both levels, on the common dialogues."""
    common = common_dialogues(items, metrics)
    columns = human_columns(items)
    inputs = [it.input for it in common]
    cells = []
    for metric in metrics:
        if metric.reason:
            continue
        x = [metric.values[it.dialogue_id] for it in common]
        for column in columns:
            y = [it.human_score(column) for it in common]
            cells.append(
                Cell("sample", metric.label, column, correlate_within_inputs(x, y, inputs, n_resamples, seed))
            )
            cells.append(Cell("dataset", metric.label, column, correlate(x, y, n_resamples, seed, inputs)))
    return cells


def human_columns(items: Sequence[Item]) -> list[str]:
    present = {d for it in items for d in it.human}
    return [d for d in DIMENSION_KEYS if d in present] + [AVERAGE]


def column_name(column: str) -> str:
    return "Average" if column == AVERAGE else dimension(column).paper_name


# --- reports --------------------------------------------------------------------------------------


def _fmt(result: Correlation, stat: str) -> str:
    """A statistic x 100 with 2 decimals [95% CI]."""
    return format_estimate(result.estimates[stat], 2, 100)


def _cell(result: Correlation, stat: str) -> result_.Cell:
    """A statistic x 100 [95% CI] as its cell; the cell's value is the statistic itself (-1..1)."""
    return result_.Cell(_fmt(result, stat), result.estimates[stat])


LEVEL_TEXT = (
    "level sample: within each input, across its systems, then the mean over inputs; level dataset: all "
    "dialogues pooled."
)


def correlation_report(
    cells: Sequence[Cell], metrics: Sequence[Metric], columns: Sequence[str],
    header: Sequence[result_.Block] = (),
) -> result_.Report:  # fmt: skip
    """Tables 14/15's layout, both levels in one table (correlation.csv): rows metrics, per column
    Spear./Pear./Kend. x 100 [95% CI]; then the dialogues per column and every row's dialogues."""
    blocks: list[result_.Block] = [*header]
    index = {(c.level, c.metric, c.column): c.result for c in cells}
    computed = [m for m in metrics if not m.reason]
    figures: list[list[result_.CellLike]] = []
    counts: list[list[result_.CellLike]] = []
    notes: dict[str, list[str]] = defaultdict(list)
    for level in LEVELS:
        figures += [
            [level, m.label, *(_cell(index[(level, m.label, c)], s) for c in columns for s in STATISTICS)]
            for m in computed
        ]
        for c in columns:
            first = next((index[(level, m.label, c)] for m in computed), None)
            if first is not None:
                counts.append([level, column_name(c), first.n, first.inputs])
        for c in cells:
            if c.level == level and c.result.note:
                notes[c.result.note].append(f"{level}: {c.metric} x {column_name(c.column)}")
    correlations = result_.Table.of(
        ["level", "Metric"] + [f"{column_name(c)} {LABELS[s]}" for c in columns for s in STATISTICS],
        figures,
        csv="correlation.csv",
        name="correlations",
        metrics={f"{column_name(c)} {LABELS[s]}": BY_STATISTIC[s] for c in columns for s in STATISTICS},
        rank_within=["level"],  # which metric follows people best, per level
    )
    blocks += [
        result_.Heading("Correlations (sample and dataset level)"),
        result_.Text(LEVEL_TEXT),
        correlations,
        result_.Text(
            "Dialogues per column (every row of a level on the same ones) and the inputs they come from:"
        ),
        result_.Table.of(
            ["level", "Column", "dialogues", "inputs"],
            counts,
            csv="correlation_dialogues.csv",
            name="dialogues per column",
        ),  # fmt: skip
    ]
    if notes:
        blocks.append(
            result_.Text(
                "\n".join(
                    ["Notes on cells:", *(f"- {why}: {', '.join(where)}" for why, where in notes.items())]
                )
            )
        )
    blocks += [
        result_.Heading("Notes"),
        result_.Text("Every row: the annotated dialogues it has a value for, and what limits it."),
        result_.Table.of(
            ["Metric", "dialogues", "note"],
            [
                [m.label, len(m.values), f"not computed: {m.reason}" if m.reason else m.note or ""]
                for m in metrics
            ],
            csv="correlation_rows.csv",
            name="rows",
        ),
        result_.Text(
            "Values x 100, [95% percentile bootstrap interval, resampled by "
            f"{correlations.resampled() or 'nothing'}]; n/a (undefined in k% of resamples) where more than "
            "5% of the resamples leave the figure undefined. Kend. is Kendall's tau-b. Human score: the "
            "annotators' median per dimension; Average: its mean over the dimensions a dialogue has."
        ),
    ]
    return result_.Report("correlation", tuple(blocks))


def _num(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 6)


def summary(cells: Sequence[Cell], metrics: Sequence[Metric]) -> dict[str, Any]:
    """Every figure for a caller of `run_correlation` (the files are the report's): level -> metric ->
    dimension -> {n, inputs, note, statistic: {value, ci, undefined_share}}; and the rows."""
    out: dict[str, Any] = {level: {} for level in LEVELS}
    for c in cells:
        out[c.level].setdefault(c.metric, {})[c.column] = {
            "n": c.result.n,
            "inputs": c.result.inputs,
            "note": c.result.note,
            **{
                s: {
                    "value": _num(e.shown()[0]),  # none where the report says n/a (`Estimate.shown`)
                    "ci": [_num(e.shown()[1]), _num(e.shown()[2])],
                    "undefined_share": _num(e.undefined),
                    "reported": _fmt(c.result, s),
                }
                for s, e in c.result.estimates.items()
            },
        }
    out["metrics"] = {
        m.label: {
            "computed": m.reason is None,
            "reason": m.reason,
            "note": m.note,
            "dialogues": len(m.values),
        }
        for m in metrics
    }
    return out
