"""People against people, and each judge against each person: the ceiling beside the judges.

Where two or more people rated the same dialogues (`esc annotate site`, then `import` and
`to-esc-rank`), `rank.py mode=agreement` adds this section to agreement.md. Per dimension:

- **people**: Krippendorff's alpha (ordinal, 0-4) between the raters, every rating used (a rater who
  skipped a dialogue leaves a gap, as alpha allows); how far people agree with each other is the
  most a judge can be expected to agree with one of them;
- **judge vs person**: per judge and rater, alpha between the judge's score (its stated score, Table
  2's reading; invalid or failed judgments are gaps) and that rater's, on the dialogues both scored.

Each figure has n (the dialogues in it) and a 95% interval resampling the independent unit (the
role card the dialogue was played from); "n/a" where alpha is undefined (fewer than 4 scores, or
one value only), and "n/a (undefined in k% of resamples)" where too many resamples were.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from esc.annotate.annotator_agreement import agreement, krippendorff_alpha
from esc.annotate.human_scores import Annotation
from esc.annotate.tasks import Label
from esc.reports import result as result_
from esc.reports.bootstrap import NO_INTERVAL, Interval, estimate, unit_index, unit_intervals
from esc.reports.estimate import Estimate, format_estimate, resampled_units
from esc.scoring.rubrics import DIMENSION_KEYS, SCORES, dimension
from esc.tasks.agreement.report import unit_name

VALUES = [str(s) for s in SCORES]


@dataclasses.dataclass(frozen=True)
class DimensionRow:
    """One dimension's alphas (NaN: undefined), each with n, the dialogues in it."""

    dimension: str
    people: Estimate
    judges: dict[tuple[str, str], Estimate]  # (judge, rater) -> alpha


def alpha_text(e: Estimate) -> str:
    """ "0.412 [0.101, 0.700], n=30"."""
    return f"{format_estimate(e)}, n={e.n}"


def _alpha(table: Sequence[Sequence[int | None]]) -> float:
    rows = [[None if x is None else str(x) for x in row] for row in table]
    value = krippendorff_alpha(rows, VALUES, ordinal=True)
    return math.nan if value is None else value


def _figure(
    table: list[list[int | None]],
    dialogues: list[str],
    unit_of: Mapping[str, str],
    n_resamples: int,
    seed: int,
) -> Estimate:
    """Alpha of a coders x dialogues table, resampling the dialogues' units."""
    if not dialogues:
        return estimate(math.nan, NO_INTERVAL, 0)
    units = [unit_of[d] for d in dialogues]
    distinct, members = unit_index(units)
    data = np.array([[np.nan if x is None else x for x in row] for row in table], dtype=float)

    def statistic(picked: np.ndarray) -> float:
        columns = np.concatenate([members[i] for i in picked])
        part = data[:, columns]
        return _alpha([[None if np.isnan(x) else int(x) for x in row] for row in part])

    value = statistic(np.arange(len(distinct)))
    (interval,) = unit_intervals(len(distinct), statistic, n_resamples, seed)
    return estimate(value, interval, len(units), unit_name(zip(units, dialogues, strict=True)))


def rater_rows(
    annotations: Sequence[Annotation], judges: Mapping[str, Mapping[tuple[str, str], Any]], n_resamples: int,
    seed: int,
) -> tuple[list[str], list[DimensionRow]]:  # fmt: skip
    """The raters, and per dimension the people's alpha and each judge's against each rater
    (`judges`: name -> {(dialogue id, dimension): Prediction})."""
    by_item: dict[tuple[str, str], dict[str, int]] = {}
    unit_of: dict[str, str] = {}
    for ann in annotations:
        by_item.setdefault((ann.dialogue_id, ann.dimension), {})[ann.annotator] = ann.score
        unit_of[ann.dialogue_id] = ann.unit
    raters = sorted({ann.annotator for ann in annotations})
    rows = []
    for dim in DIMENSION_KEYS:
        dialogues = sorted(d for (d, k) in by_item if k == dim)
        if not dialogues:
            continue
        shared = [d for d in dialogues if len(by_item[(d, dim)]) >= 2]
        people = _figure(
            [[by_item[(d, dim)].get(r) for d in shared] for r in raters], shared, unit_of, n_resamples, seed
        )
        judged: dict[tuple[str, str], Estimate] = {}
        for name, predictions in judges.items():
            for rater in raters:
                both = [
                    d
                    for d in dialogues
                    if rater in by_item[(d, dim)]
                    and getattr(predictions.get((d, dim)), "score", None) is not None
                ]
                table = [
                    [predictions[(d, dim)].score for d in both],
                    [by_item[(d, dim)][rater] for d in both],
                ]
                judged[(name, rater)] = _figure(table, both, unit_of, n_resamples, seed)
        rows.append(DimensionRow(dim, people, judged))
    return raters, rows


def _cell(e: Estimate) -> result_.Cell:
    return result_.Cell(alpha_text(e), e)


def people_blocks(
    raters: Sequence[str], rows: Sequence[DimensionRow], judges: Sequence[str]
) -> list[result_.Block]:
    """The section of agreement.md: one table, a row per dimension (what the intervals resampled
    read from its figures)."""
    pairs = [(j, r) for j in judges for r in raters]
    unit = resampled_units(e.unit for row in rows for e in (row.people, *row.judges.values()))
    return [
        result_.Heading("People against people, and each judge against each person"),
        result_.Text(
            f"Krippendorff's alpha (ordinal, 0-4) between the {len(raters)} raters ({', '.join(raters)}): "
            "the ceiling a judge can be expected to reach; then each judge's stated score against each "
            f"rater's. n: dialogues in the figure; 95% intervals resampled by {unit}; n/a: undefined (fewer "
            "than 4 scores, or every score the same)."
        ),
        result_.Table.of(
            ["Dimension", "people (alpha between raters)", *(f"{j} vs {r}" for j, r in pairs)],
            [
                [
                    dimension(row.dimension).paper_name,
                    _cell(row.people),
                    *(_cell(row.judges[p]) for p in pairs),
                ]
                for row in rows
            ],
            csv="rater_agreement.csv",
            name="people against people",
        ),
    ]


# --- `esc annotate agreement`: intervals for the annotators' agreement --------------------------


def label_intervals(
    labels: Sequence[Label], units: Mapping[str, str] | None, n_resamples: int, seed: int
) -> dict[str, dict[str, Interval]]:
    """Per field, 95% intervals of Krippendorff's alpha and Cohen's kappa (`agreement`'s figures),
    resampling units: a task's role card where `units` (task id -> unit) says, else the task. A
    task drawn twice counts twice (its copies get their own ids)."""
    tasks = sorted({x.task_id for x in labels})
    by_task: dict[str, list[Label]] = {}
    for label in labels:
        by_task.setdefault(label.task_id, []).append(label)
    distinct, members = unit_index([(units or {}).get(t, t) for t in tasks])
    fields = [row["field"] for row in agreement(labels)]

    def statistic(picked: np.ndarray) -> np.ndarray:
        drawn = [
            dataclasses.replace(label, task_id=f"{label.task_id}#{k}")
            for k, i in enumerate(np.concatenate([members[u] for u in picked]))
            for label in by_task[tasks[i]]
        ]
        rows = {row["field"]: row for row in agreement(drawn)}
        values = []
        for name in fields:
            row = rows.get(name, {})
            values += [row.get("krippendorff_alpha"), row.get("cohen_kappa")]
        return np.array([math.nan if v is None else v for v in values], dtype=float)

    intervals = unit_intervals(len(distinct), statistic, n_resamples, seed)
    return {
        name: {"krippendorff_alpha": intervals[2 * k], "cohen_kappa": intervals[2 * k + 1]}
        for k, name in enumerate(fields)
    }


def label_unit(labels: Sequence[Label], units: Mapping[str, str] | None) -> str:
    """What `label_intervals` resamples for these labels, in words: "role card" where `units` names
    every task's card, "task" where it names none, "role card, else task" for both."""
    known = {x.task_id in (units or {}) for x in labels}
    return "role card" if known == {True} else "task" if known <= {False} else "role card, else task"


def task_units(tasks: Mapping[str, Any]) -> dict[str, str]:
    """Task id -> the role card its dialogue was played from (`language:card id`), where known."""
    units = {}
    for task_id, task in tasks.items():
        card = task.payload.card_id
        if card is None and isinstance(task.payload.card, dict):  # a card task's: the card's fields
            card = task.payload.card.get("id")
        if card is not None:
            units[task_id] = f"{task.language}:{card}"
    return units


def with_intervals(
    rows: Sequence[Mapping[str, Any]], intervals: Mapping[str, Mapping[str, Interval]]
) -> list[dict[str, Any]]:
    """`agreement`'s rows with each interval's ends and undefined share as columns."""
    out = []
    for row in rows:
        extra: dict[str, Any] = {}
        for stat, interval in intervals.get(row["field"], {}).items():
            extra[f"{stat}_low"] = None if math.isnan(interval.low) else interval.low
            extra[f"{stat}_high"] = None if math.isnan(interval.high) else interval.high
            extra[f"{stat}_undefined"] = None if math.isnan(interval.undefined) else interval.undefined
        out.append({**row, **extra})
    return out


def annotator_markdown(
    rows: Sequence[Mapping[str, Any]], intervals: Mapping[str, Mapping[str, Interval]], unit: str
) -> str:
    """`esc annotate agreement`'s table with Cohen's kappa and Krippendorff's alpha as
    "value [95% interval]" (resampling `unit`s), n/a where undefined or unstable."""

    def cell(row: Mapping[str, Any], stat: str) -> result_.CellLike:
        value = row[stat]
        if stat not in ("cohen_kappa", "krippendorff_alpha"):
            return "n/a" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
        interval = intervals.get(row["field"], {}).get(stat, NO_INTERVAL)
        e = estimate(math.nan if value is None else value, interval, unit=unit)
        return result_.Cell(format_estimate(e), e)

    head = ["field", "tasks", "annotators", "agreement", "cohen_kappa", "cohen_kappa_quadratic",
            "fleiss_kappa", "krippendorff_alpha"]  # fmt: skip
    table = result_.Table.of(head, [[cell(r, h) for h in head] for r in rows])
    each = "" if unit == "task" else " (each with all its tasks)"
    note = result_.Text(f"95% intervals resampled by {unit}{each}.")
    return result_.Report("annotator_agreement", (table, note)).to_markdown()
