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
from esc.reports.bootstrap import NO_INTERVAL, Interval, format_figure, unit_index, unit_intervals
from esc.scoring.rubrics import DIMENSION_KEYS, SCORES, dimension

VALUES = [str(s) for s in SCORES]


@dataclasses.dataclass(frozen=True)
class Figure:
    """Alpha on `n` dialogues, with its interval (NaN: undefined)."""

    value: float
    interval: Interval
    n: int

    def text(self) -> str:
        return f"{format_figure(self.value, self.interval)}, n={self.n}"


@dataclasses.dataclass(frozen=True)
class DimensionRow:
    dimension: str
    people: Figure
    judges: dict[tuple[str, str], Figure]  # (judge, rater) -> figure


def _alpha(table: Sequence[Sequence[int | None]]) -> float:
    rows = [[None if x is None else str(x) for x in row] for row in table]
    value = krippendorff_alpha(rows, VALUES, ordinal=True)
    return math.nan if value is None else value


def _figure(table: list[list[int | None]], units: list[str], n_resamples: int, seed: int) -> Figure:
    """Alpha of a coders x dialogues table, resampling the dialogues' units."""
    if not units:
        return Figure(math.nan, NO_INTERVAL, 0)
    distinct, members = unit_index(units)
    data = np.array([[np.nan if x is None else x for x in row] for row in table], dtype=float)

    def statistic(picked: np.ndarray) -> float:
        columns = np.concatenate([members[i] for i in picked])
        part = data[:, columns]
        return _alpha([[None if np.isnan(x) else int(x) for x in row] for row in part])

    value = statistic(np.arange(len(distinct)))
    (interval,) = unit_intervals(len(distinct), statistic, n_resamples, seed)
    return Figure(value, interval, len(units))


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
            [[by_item[(d, dim)].get(r) for d in shared] for r in raters],
            [unit_of[d] for d in shared], n_resamples, seed,
        )  # fmt: skip
        judged: dict[tuple[str, str], Figure] = {}
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
                judged[(name, rater)] = _figure(table, [unit_of[d] for d in both], n_resamples, seed)
        rows.append(DimensionRow(dim, people, judged))
    return raters, rows


def _cell(f: Figure) -> result_.Cell:
    return result_.figure(f.text(), f.value, f.interval, f.n)


def people_blocks(
    raters: Sequence[str], rows: Sequence[DimensionRow], judges: Sequence[str]
) -> list[result_.Block]:
    """The section of agreement.md: one table, a row per dimension."""
    pairs = [(j, r) for j in judges for r in raters]
    return [
        result_.Heading("People against people, and each judge against each person"),
        result_.Text(
            f"Krippendorff's alpha (ordinal, 0-4) between the {len(raters)} raters ({', '.join(raters)}): "
            "the ceiling a judge can be expected to reach; then each judge's stated score against each "
            "rater's. n: dialogues in the figure; 95% intervals resample role cards; n/a: undefined (fewer "
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
        ),
    ]


def to_markdown(raters: Sequence[str], rows: Sequence[DimensionRow], judges: Sequence[str]) -> str:
    """`people_blocks` as the markdown appended to agreement.md's (it starts with a blank line)."""
    return "\n" + result_.Report("agreement", tuple(people_blocks(raters, rows, judges))).to_markdown()


def to_json(raters: Sequence[str], rows: Sequence[DimensionRow]) -> dict[str, Any]:
    def number(x: float) -> float | None:
        return None if math.isnan(x) else x

    def figure(f: Figure) -> dict[str, Any]:
        return {
            "alpha": number(f.value),
            "low": number(f.interval.low),
            "high": number(f.interval.high),
            "undefined_share": number(f.interval.undefined),
            "n": f.n,
        }

    return {
        "raters": list(raters),
        "dimensions": {
            row.dimension: {
                "people": figure(row.people),
                "judges": {f"{j} vs {r}": figure(f) for (j, r), f in row.judges.items()},
            }
            for row in rows
        },
    }


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


def task_units(tasks: Mapping[str, Any]) -> dict[str, str]:
    """Task id -> the role card its dialogue was played from (`language:card id`), where known."""
    units = {}
    for task_id, task in tasks.items():
        card = task.payload.get("card_id") if isinstance(task.payload, dict) else None
        if card is None and isinstance(task.payload, dict) and isinstance(task.payload.get("card"), dict):
            card = task.payload["card"].get("id")
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

    def figure(row: Mapping[str, Any], stat: str) -> str:
        value = row[stat]
        interval = intervals.get(row["field"], {}).get(stat, NO_INTERVAL)
        return format_figure(math.nan if value is None else value, interval)

    def show(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)

    head = ["field", "tasks", "annotators", "agreement", "cohen_kappa", "cohen_kappa_quadratic",
            "fleiss_kappa", "krippendorff_alpha"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [show(r[h]) for h in head]
        cells[4], cells[7] = figure(r, "cohen_kappa"), figure(r, "krippendorff_alpha")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n95% intervals resample {unit}s (each with all its tasks).\n"
