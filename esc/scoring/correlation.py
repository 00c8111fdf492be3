"""How well automatic metrics follow human scores (paper Tables 3, 13, 14 and 15).

Rows are metrics, each one number per dialogue: the text metrics of `esc.scoring.textmetrics` on the
supporter's ("assistant") turns, and, per judge in the score files, `ESC-<dimension>` (its valid score
on that dimension, Table 14's rows) and `ESC-Eval` (the mean of its valid scores over the dimensions,
Table 3's row and Table 14's "Average" row). Columns are the human-scored dimensions (the annotators'
median, `human_reference`) and `Average`, the mean human score over the dimensions a dialogue has.

- sample level: over dialogues, Spearman, Pearson and Kendall's tau-b (scipy.stats);
- dataset level: over groups of dialogues (`group_by`: the annotation's source or language, or the
  score record's target or role-player), correlating the group means of metric and human score;
  n/a below 3 groups;
- each figure with a percentile bootstrap 95% interval (scipy.stats.bootstrap, pairs resampled
  together); resamples where a correlation is undefined (a constant series) are left out, and the
  interval is n/a when more than half are.

Reference-based metrics (BLEU, ROUGE-L, METEOR) need references: a JSONL file with one line per
dialogue, `{"dialogue_id": ..., "references": ["...", ...]}`. A dialogue without one is left out of
those rows, and a row with none is reported as not computed, with the reason; nothing is invented.

    python rank.py mode=correlation correlation.scores=[RANK_OUT] correlation.references=FILE
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.errors import ConfigError, DataError, UserError
from esc.scoring.annotations import Annotation, default_esconv_path, human_reference, read_annotations
from esc.scoring.bootstrap import paired_intervals
from esc.scoring.judge import VALID
from esc.scoring.rubrics import DIMENSION_KEYS, dimension
from esc.scoring.store import ScoreRecord, read_scores, score_file_paths
from esc.scoring.textmetrics import METRICS as TEXT_METRICS
from esc.sft.sample import read_jsonl

log = logging.getLogger(__name__)

STATISTICS = ("spearman", "pearson", "kendall")
LABELS = {"spearman": "Spear.", "pearson": "Pear.", "kendall": "Kend."}
AVERAGE = "average"
LEVELS = ("sample", "dataset")
MIN_POINTS = 3
ANNOTATION_GROUPS = ("source", "language")
RECORD_GROUPS = ("target", "roleplayer")
NAN_INTERVAL = (math.nan, math.nan)


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


def _intervals(x: np.ndarray, y: np.ndarray, n_resamples: int, seed: int) -> list[tuple[float, float]]:
    return paired_intervals(x, y, _statistics, n_resamples, seed)


@dataclasses.dataclass
class Correlation:
    n: int  # pairs (dialogues, or groups at dataset level)
    values: dict[str, float]  # statistic -> value, NaN when undefined
    intervals: dict[str, tuple[float, float]]  # statistic -> 95% interval
    note: str | None = None  # why the values are n/a


def correlate(
    metric: Sequence[float], human: Sequence[float], n_resamples: int = 1000, seed: int = 0
) -> Correlation:
    """Spearman, Pearson and Kendall of the pairs, NaN pairs dropped, with bootstrap intervals."""
    x, y = np.asarray(metric, dtype=float), np.asarray(human, dtype=float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    nan = dict.fromkeys(STATISTICS, math.nan)
    if len(x) < MIN_POINTS:
        return Correlation(
            len(x), nan, dict.fromkeys(STATISTICS, NAN_INTERVAL), f"fewer than {MIN_POINTS} pairs"
        )
    for series, name in ((x, "metric"), (y, "human score")):
        if np.all(series == series[0]):
            return Correlation(len(x), nan, dict.fromkeys(STATISTICS, NAN_INTERVAL), f"constant {name}")
    values = _statistics(x, y)
    intervals = _intervals(x, y, n_resamples, seed)
    return Correlation(
        len(x),
        dict(zip(STATISTICS, map(float, values), strict=True)),
        dict(zip(STATISTICS, intervals, strict=True)),
    )


def group_means(
    metric: Sequence[float], human: Sequence[float], groups: Sequence[str | None]
) -> tuple[list[str], list[float], list[float]]:
    """Per group (None: in none), the mean metric and mean human score over pairs with both defined."""
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for m, h, g in zip(metric, human, groups, strict=True):
        if g is not None and not (math.isnan(m) or math.isnan(h)):
            pairs[g].append((m, h))
    names = sorted(pairs)
    return (
        names,
        [float(np.mean([m for m, _ in pairs[g]])) for g in names],
        [float(np.mean([h for _, h in pairs[g]])) for g in names],
    )


# --- inputs ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Item:
    """One annotated dialogue: the supporter's turns and the human score per dimension."""

    dialogue_id: str
    language: str
    turns: tuple[str, ...]  # the "assistant" turns, the hypothesis of the text metrics
    human: dict[str, float]  # dimension key -> human score (annotators' median)
    annotation: Annotation  # the first one, for grouping

    def human_score(self, column: str) -> float:
        if column == AVERAGE:
            return float(np.mean(list(self.human.values())))
        return self.human.get(column, math.nan)


def load_items(annotations: Sequence[Annotation]) -> list[Item]:
    reference = human_reference(annotations)
    items: dict[str, Item] = {}
    for ann in annotations:
        if ann.dialogue_id not in items:
            turns = tuple(text for role, text in ann.lines if role == "assistant")
            items[ann.dialogue_id] = Item(ann.dialogue_id, ann.language, turns, {}, ann)
        items[ann.dialogue_id].human[ann.dimension] = float(reference[(ann.dialogue_id, ann.dimension)])
    return list(items.values())


def read_references(path: Path) -> dict[str, list[str]]:
    """dialogue id -> reference texts, from `{"dialogue_id": ..., "references": [...]}` lines."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("correlation.references", f"{path}: no such file")
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
            rows.append(_judge_row(f"ESC-{dim}{suffix}", values, judge))
        means = {i: float(np.mean(list(s.values()))) for i, s in valid.items() if s}
        rows.append(_judge_row(f"ESC-Eval{suffix}", means, judge))
    return rows, warns


def _judge_row(label: str, values: dict[str, float], judge: str) -> Metric:
    reason = None if values else f"no valid judgment by {judge} on an annotated dialogue"
    return Metric(label, values, reason=reason)


def dialogue_groups(
    items: Sequence[Item], group_by: str | None, records: Sequence[ScoreRecord]
) -> list[str | None]:
    """The group of each item, for the dataset level (None: in no group)."""
    if group_by is None:
        return [None] * len(items)
    if group_by in ANNOTATION_GROUPS:
        values = [getattr(it.annotation, group_by) for it in items]
    else:
        first: dict[str, Any] = {}
        for record in records:
            first.setdefault(record.dialogue_id, getattr(record, group_by))
        values = [first.get(it.dialogue_id) for it in items]
    return [None if v is None else str(v) for v in values]


# --- the analysis ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Cell:
    level: str
    metric: str
    column: str  # dimension key or AVERAGE
    result: Correlation


def analyse(
    items: Sequence[Item],
    metrics: Sequence[Metric],
    groups: Sequence[str | None],
    n_resamples: int = 1000,
    seed: int = 0,
    group_note: str | None = None,
) -> list[Cell]:
    """Every computed metric against every human column, at both levels (`group_note`: why there is
    no dataset level at all)."""
    columns = human_columns(items)
    cells = []
    for metric in metrics:
        if metric.reason:
            continue
        x = [metric.values.get(it.dialogue_id, math.nan) for it in items]
        for column in columns:
            y = [it.human_score(column) for it in items]
            cells.append(Cell("sample", metric.label, column, correlate(x, y, n_resamples, seed)))
            names, gx, gy = group_means(x, y, groups)
            result = correlate(gx, gy, n_resamples, seed)
            if group_note:
                result.note = group_note
            elif len(names) < MIN_POINTS:
                result.note = f"fewer than {MIN_POINTS} groups ({len(names)}: {', '.join(names) or 'none'})"
            cells.append(Cell("dataset", metric.label, column, result))
    return cells


def human_columns(items: Sequence[Item]) -> list[str]:
    present = {d for it in items for d in it.human}
    return [d for d in DIMENSION_KEYS if d in present] + [AVERAGE]


def column_name(column: str) -> str:
    return "Average" if column == AVERAGE else dimension(column).paper_name


# --- reports --------------------------------------------------------------------------------------


def _fmt(result: Correlation, stat: str) -> str:
    value = result.values[stat]
    if math.isnan(value):
        return "n/a"
    low, high = result.intervals[stat]
    text = f"{value * 100:.2f}"
    if not (math.isnan(low) or math.isnan(high)):
        text += f" [{low * 100:.2f}, {high * 100:.2f}]"
    return text


def to_markdown(
    cells: Sequence[Cell], metrics: Sequence[Metric], columns: Sequence[str], header: Sequence[str] = ()
) -> str:
    """Tables 14/15's layout per level: rows metrics, per column Spear./Pear./Kend. x 100 [95% CI]."""
    lines = [*header]
    index = {(c.level, c.metric, c.column): c.result for c in cells}
    computed = [m for m in metrics if not m.reason]
    for level in LEVELS:
        title = "Sample level (over dialogues)" if level == "sample" else "Dataset level (over group means)"
        head = ["Metric"] + [f"{column_name(c)} {LABELS[s]}" for c in columns for s in STATISTICS]
        lines += ["", f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m in computed:
            row = [_fmt(index[(level, m.label, c)], s) for c in columns for s in STATISTICS]
            lines.append("| " + " | ".join([m.label, *row]) + " |")
        head = ["Metric", *(column_name(c) for c in columns)]
        what = "dialogues" if level == "sample" else "groups"
        lines += [
            "",
            f"Pairs ({what}) per cell:",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        for m in computed:
            lines.append(
                "| " + " | ".join([m.label, *(str(index[(level, m.label, c)].n) for c in columns)]) + " |"
            )
        notes: dict[str, list[str]] = defaultdict(list)
        for c in cells:
            if c.level == level and c.result.note:
                notes[c.result.note].append(f"{c.metric} x {column_name(c.column)}")
        if notes:
            lines += ["", "n/a cells:"] + [f"- {why}: {', '.join(where)}" for why, where in notes.items()]
    lines += ["", "## Notes", ""]
    lines += [f"- {m.label}: not computed: {m.reason}" for m in metrics if m.reason]
    lines += [f"- {m.label}: {m.note}" for m in metrics if m.note and not m.reason]
    lines.append(
        "- Values x 100, [percentile bootstrap 95% interval]; Kend. is Kendall's tau-b. Human score: the "
        "annotators' median per dimension; Average: its mean over the dimensions a dialogue has."
    )
    return "\n".join(lines) + "\n"


def _num(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 6)


def write_csv(cells: Sequence[Cell], path: Path) -> None:
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            ["level", "metric", "dimension", "statistic", "value", "ci_low", "ci_high", "n", "note"]
        )
        for c in cells:
            for s in STATISTICS:
                low, high = c.result.intervals[s]
                writer.writerow(
                    [c.level, c.metric, c.column, s, _num(c.result.values[s]), _num(low), _num(high)]
                    + [c.result.n, c.result.note or ""]
                )


def summary(cells: Sequence[Cell], metrics: Sequence[Metric]) -> dict[str, Any]:
    """JSON-ready: level -> metric -> dimension -> {n, note, statistic: {value, ci}}; and the rows."""
    out: dict[str, Any] = {level: {} for level in LEVELS}
    for c in cells:
        out[c.level].setdefault(c.metric, {})[c.column] = {
            "n": c.result.n,
            "note": c.result.note,
            **{
                s: {"value": _num(c.result.values[s]), "ci": [_num(x) for x in c.result.intervals[s]]}
                for s in STATISTICS
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


# --- entry point ------------------------------------------------------------------------------------


def _config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    names = cfg.get("metrics")
    names = list(TEXT_METRICS) if names is None else [str(n) for n in names]
    unknown = [n for n in names if n not in TEXT_METRICS]
    if unknown:
        raise ConfigError("correlation.metrics", f"unknown {unknown}; known: {', '.join(TEXT_METRICS)}")
    group_by = cfg.get("group_by", "source")  # null: no dataset level
    if group_by is not None and group_by not in ANNOTATION_GROUPS + RECORD_GROUPS:
        known = ", ".join(ANNOTATION_GROUPS + RECORD_GROUPS)
        raise ConfigError("correlation.group_by", f"{group_by!r} is not one of {known} (or null)")
    n_resamples = int(cfg.get("bootstrap", 1000))
    if n_resamples < 0:
        raise ConfigError("correlation.bootstrap", "resamples must be >= 0 (0: no intervals)")
    return {
        "annotations": Path(str(cfg.get("annotations") or default_esconv_path())),
        "scores": score_paths(cfg.get("scores")),
        "references": None if not cfg.get("references") else Path(str(cfg["references"])),
        "group_by": group_by,
        "metrics": names,
        "bootstrap": n_resamples,
        "seed": int(cfg.get("seed", 42)),
    }


def run_correlation(cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """The analysis of `cfg` (keys: annotations, scores, references, group_by, metrics, bootstrap,
    seed); writes OUT/correlation.{md,csv,json} and returns their content and paths."""
    conf = _config(cfg)
    out = Path(out)
    log.info("Reading annotations from %s", conf["annotations"])
    items = load_items(read_annotations(conf["annotations"]))
    known = {it.dialogue_id for it in items}
    warns: list[str] = []
    references = None
    if conf["references"] is not None:
        references = read_references(conf["references"])
        unknown = sorted(set(references) - known)
        if unknown:
            warns.append(
                f"references {conf['references']}: {len(unknown)} of {len(references)} dialogue ids match no "
                f"annotation (e.g. {', '.join(unknown[:3])}); left out"
            )
    records = [r for p in conf["scores"] for r in read_scores(p)]
    if conf["scores"] and not records:
        raise UserError(
            f"no score records in {', '.join(map(str, conf['scores']))} (config `correlation.scores`)"
        )
    judge_rows, judge_warns = judge_metrics(records, items)
    warns += judge_warns
    for warning in warns:
        log.warning(warning)
    metrics = text_metrics(items, conf["metrics"], references) + judge_rows
    groups = dialogue_groups(items, conf["group_by"], records)
    group_note = None
    if conf["group_by"] is None:
        group_note = "no grouping (group_by: null)"
    elif all(g is None for g in groups):
        where = "annotation" if conf["group_by"] in ANNOTATION_GROUPS else "score record (correlation.scores)"
        group_note = f"no annotated dialogue has a `{conf['group_by']}` in its {where}"
    cells = analyse(items, metrics, groups, conf["bootstrap"], conf["seed"], group_note)
    columns = human_columns(items)
    n_groups = len({g for g in groups if g is not None})
    header = [
        "# Correlation with human scores",
        "",
        f"{len(items)} annotated dialogues ({conf['annotations']}); human-scored dimensions: "
        f"{', '.join(column_name(c) for c in columns[:-1])}; dataset level grouped by "
        f"`{conf['group_by']}` ({n_groups} groups); {conf['bootstrap']} bootstrap resamples.",
        *(f"\nWarning: {w}" for w in warns),
    ]
    markdown = to_markdown(cells, metrics, columns, header)
    result = {
        "annotations": str(conf["annotations"]),
        "scores": [str(p) for p in conf["scores"]],
        "references": None if conf["references"] is None else str(conf["references"]),
        "dialogues": len(items),
        "group_by": conf["group_by"],
        "groups": n_groups,
        "dimensions": columns,
        "bootstrap": conf["bootstrap"],
        "seed": conf["seed"],
        "warnings": warns,
        **summary(cells, metrics),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "correlation.md").write_text(markdown, encoding="utf-8")
    write_csv(cells, out / "correlation.csv")
    (out / "correlation.json").write_text(
        json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    files = {k: str(out / f"correlation.{k}") for k in ("md", "csv", "json")}
    return {"markdown": markdown, "files": files, "warnings": warns, "summary": result}
