"""Judge vs people on annotated dialogues: the job behind `rank.py mode=agreement` and the report
at the end of `train.py +exp=train/esc_rank`.

The annotated dialogues of one split (by default the held-out test split of the paper's 7:1:2 split
by dialogue) are scored by the judge — resumably, into ``OUT/scores/<judge>.jsonl`` — or taken from
existing rank.py score files whose dialogue ids are the annotations'. A judge trained by
`train.py +exp=train/esc_rank` is never measured on the dialogues it learned from: its adapters' folder
names them (`trained_on.json`) and they are left out. Each judgment is compared with the human score
(`esc.tasks.agreement.report`), beside the trivial baselines fitted on the training split (majority
score, dialogue length), every row on the same items.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.annotate.human_scores import Annotation, human_reference, splits
from esc.errors import ConfigError, UserError
from esc.reports import result as result_
from esc.reports.result import write_result
from esc.scoring.judge import VALID, ScoreItem
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord, merge_score_files
from esc.tasks.agreement import report as agree

log = logging.getLogger(__name__)

MAJORITY = "majority (train)"
LENGTH = "dialogue length (train fit)"
Predictions = dict[tuple[str, str], agree.Prediction]
SPLITS = ("train", "val", "test", "all")


def annotated_items(annotations: Sequence[Annotation]) -> list[ScoreItem]:
    """One item per annotated (dialogue, dimension), in file order."""
    seen: dict[tuple[str, str], ScoreItem] = {}
    for ann in annotations:
        key = (ann.dialogue_id, ann.dimension)
        seen.setdefault(key, ScoreItem(ann.dialogue_id, ann.dimension, ann.language, ann.lines))
    return list(seen.values())


def prediction(record: ScoreRecord) -> agree.Prediction:
    """What agreement reads of a judgment: no score unless valid."""
    if record.status != VALID:
        return agree.Prediction()
    return agree.Prediction(record.score, record.expected, record.answer_mass)


def predictions(records: Mapping[tuple[str, str], ScoreRecord]) -> Predictions:
    """The prediction of every judged (item, dimension)."""
    return {key: prediction(r) for key, r in records.items()}


def dialogue_length(ann: Annotation) -> int:
    """Characters in the dialogue the judge reads (the length baseline's one feature)."""
    return sum(len(text) for _, text in ann.lines)


def agreement_items(annotations: Sequence[Annotation]) -> list[agree.Item]:
    """One item per annotated (dialogue, dimension): the human score (annotators' median), the
    resampling unit (the dialogue's input, else the dialogue) and the source."""
    reference = human_reference(annotations)
    first: dict[tuple[str, str], Annotation] = {}
    for ann in annotations:
        first.setdefault((ann.dialogue_id, ann.dimension), ann)
    return [agree.Item(key, reference[key], ann.unit, ann.source) for key, ann in first.items()]


#: why agreement.split=all reports no baselines (the train split is part of what is evaluated)
IN_SAMPLE = (
    "Baselines left out: with agreement.split=all the majority score and the length line would be fitted "
    "on the items they are scored on; measure them on split=test."
)


def baselines(train_part: Sequence[Annotation], evaluated: Sequence[Annotation]) -> dict[str, Predictions]:
    """Per dimension, fitted on `train_part`: the majority score (its expected reading the training
    mean, the constant with the least squared error) and a least-squares line on the dialogue's
    length (argmax: the line rounded; expected: the line)."""
    lengths = {a.dialogue_id: dialogue_length(a) for a in evaluated}
    majority: Predictions = {}
    length: Predictions = {}
    for dim in DIMENSION_KEYS:
        train_dim = [a for a in train_part if a.dimension == dim]
        keys = {(a.dialogue_id, a.dimension) for a in evaluated if a.dimension == dim}
        if not train_dim or not keys:
            continue
        scores = [a.score for a in train_dim]
        best, mean = agree.majority_baseline(scores), sum(scores) / len(scores)
        fit = agree.length_baseline([dialogue_length(a) for a in train_dim], scores)
        for key in keys:
            majority[key] = agree.Prediction(best, mean)
            value = fit(lengths[key[0]])
            length[key] = agree.Prediction(int(value + 0.5), value)
    return {MAJORITY: majority, LENGTH: length}


def split_annotations(data: Mapping[str, Any], split: str) -> tuple[list[Annotation], list[Annotation]]:
    """(the annotations to evaluate on, the training split the baselines are fitted on); `split`
    one of SPLITS (`agreement.split`, checked by its settings)."""
    parts = splits(data)
    evaluated = [a for p in ("train", "val", "test") for a in parts[p]] if split == "all" else parts[split]
    if not evaluated:
        raise ConfigError("agreement.split", f"the {split} split has no annotations: nothing to measure")
    return evaluated, parts["train"]


def sample_dialogues(
    annotations: Sequence[Annotation], limit: int | None, seed: int = 42
) -> list[Annotation]:
    """The annotations of `limit` dialogues drawn by a seeded hash of their ids (None: all), so a
    smaller evaluation is a random sample of the split, the same on every machine."""
    if not limit:  # `rank.eval_dialogues`: null or >= 1 (its settings)
        return list(annotations)
    ids = sorted(
        dict.fromkeys(a.dialogue_id for a in annotations),
        key=lambda d: hashlib.sha256(f"sample:{seed}:{d}".encode()).hexdigest(),
    )
    keep = set(ids[: int(limit)])
    return [a for a in annotations if a.dialogue_id in keep]


# --- what a trained judge learned from -----------------------------------------------------------


def scores_from_files(paths: Sequence[Path]) -> tuple[dict[str, Predictions], list[str]]:
    """(judge -> predictions, the judges' names) from rank.py score files."""
    records = merge_score_files(paths)
    if not records:
        raise UserError(f"no score records in {', '.join(map(str, paths))}")
    by_judge: dict[str, Predictions] = {}
    for record in records:
        by_judge.setdefault(record.judge, {})[record.key] = prediction(record)
    return by_judge, sorted(by_judge)


def write_agreement(
    out: Path, tables: Sequence[agree.Table], title: str, extra: Sequence[result_.Block] = ()
) -> str:
    """OUT/agreement.md, agreement.result.json and the tables' CSVs (agreement.csv: every figure;
    `esc.reports.result.write_result`; `extra`: sections after the tables, the raters' and the
    breakdowns); returns the headline tables and the differences, for the console."""
    blocks = (*agree.agreement_blocks(tables, title=title), *extra)
    write_result(out, result_.Report("agreement", blocks))
    headline = result_.Report("agreement", tuple(agree.agreement_blocks(tables, title, full=False)))
    return headline.to_markdown() + f"\nEvery figure (MAE, Pearson, Kendall too): {out / 'agreement.md'}\n"


def coverage_warning(predicted: Mapping[tuple[str, str], Any], items: Sequence[agree.Item], who: str) -> None:
    """Log how many annotated pairs the judge's scores do not cover (they count as invalid)."""
    missing = sum(1 for item in items if item.key not in predicted)
    if missing:
        log.warning(
            "%s: %d of %d annotated (dialogue, dimension) pairs have no judgment; counted as invalid",
            who,
            missing,
            len(items),
        )
