"""Judge vs people on annotated dialogues: the job behind `rank.py mode=agreement` and the report
at the end of `train.py +exp=esc_rank`.

The annotated dialogues of one split (by default the held-out test split of the paper's 7:1:2 split
by dialogue) are scored by the judge — resumably, into ``OUT/scores/<judge>.jsonl`` — or taken from
existing rank.py score files whose dialogue ids are the annotations'. Each dimension's judgments are
then compared with the human score (`esc.scoring.agreement`), beside the trivial baselines fitted on
the training split (majority score, dialogue length).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from esc.errors import ConfigError, UserError
from esc.scoring import agreement as agree
from esc.scoring.annotations import Annotation
from esc.scoring.judge import VALID, Judge, ScoreItem
from esc.scoring.rank_data import splits
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreStore, latest, read_scores

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test", "all")


def annotated_items(annotations: Sequence[Annotation]) -> list[ScoreItem]:
    """One item per annotated (dialogue, dimension), in file order."""
    seen: dict[tuple[str, str], ScoreItem] = {}
    for ann in annotations:
        key = (ann.dialogue_id, ann.dimension)
        seen.setdefault(key, ScoreItem(ann.dialogue_id, ann.dimension, ann.language, ann.lines))
    return list(seen.values())


def judge_items(
    judge: Judge, items: Sequence[ScoreItem], store: ScoreStore, chunk: int = 32, progress: bool = True
) -> dict[tuple[str, str], int | None]:
    """Judge each item not yet in `store` (appending as it goes); {(dialogue, dim): score or None}."""
    pending = [item for item in items if not store.is_done((item.item_id, item.dimension))]
    prompt = {"style": judge.prompt, "version": judge.prompt_version}
    with tqdm(total=len(pending), unit="score", desc=f"judge {judge.name}", disable=not progress) as bar:
        for start in range(0, len(pending), chunk):
            part = pending[start : start + chunk]
            store.add(
                store.record_type.make(
                    j,
                    dialogue_id=it.item_id,
                    dimension=it.dimension,
                    language=it.language,
                    judge=judge.name,
                    prompt=prompt,
                )
                for it, j in zip(part, judge.judge(part), strict=True)
            )
            bar.update(len(part))
    return {key: (r.score if r.status == VALID else None) for key, r in store.records.items()}


def dialogue_length(ann: Annotation) -> int:
    """Characters in the dialogue the judge reads (the length baseline's one feature)."""
    return sum(len(text) for _, text in ann.lines)


def judge_agreement(
    label: str,
    predicted: Mapping[tuple[str, str], int | None],
    reference: Mapping[tuple[str, str], int],
    n_resamples: int,
    seed: int,
) -> list[agree.Agreement]:
    """Per dimension, `predicted` against `reference`; an item the judge never scored counts as invalid."""
    pairs: dict[str, list[tuple[int | None, int]]] = defaultdict(list)
    for key, human in reference.items():
        pairs[key[1]].append((predicted.get(key), human))
    ordered = {d: pairs[d] for d in DIMENSION_KEYS if d in pairs}
    return agree.by_dimension(ordered, label, n_resamples, seed)


def baselines(
    train_part: Sequence[Annotation],
    evaluated: Sequence[Annotation],
    reference: Mapping[tuple[str, str], int],
    n_resamples: int,
    seed: int,
) -> list[agree.Agreement]:
    """Majority score and a length fit, both from `train_part`, on the evaluated items."""
    lengths = {a.dialogue_id: dialogue_length(a) for a in evaluated}
    results = []
    for dim in DIMENSION_KEYS:
        train_dim = [a for a in train_part if a.dimension == dim]
        keys = [k for k in reference if k[1] == dim]
        if not train_dim or not keys:
            continue
        human = [reference[k] for k in keys]
        majority = agree.majority_baseline([a.score for a in train_dim])
        fit = agree.length_baseline([dialogue_length(a) for a in train_dim], [a.score for a in train_dim])
        for label, predicted in (
            ("majority (train)", [majority] * len(keys)),
            ("dialogue length (train fit)", [fit(lengths[k[0]]) for k in keys]),
        ):
            results.append(agree.agreement(label, dim, predicted, human, n_resamples, seed))
    return results


def split_annotations(data: Mapping[str, Any], split: str) -> tuple[list[Annotation], list[Annotation]]:
    """(the annotations to evaluate on, the training split the baselines are fitted on)."""
    if split not in SPLITS:
        raise ConfigError("agreement.split", f"{split!r} is not one of {', '.join(SPLITS)}")
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
    if not limit:
        return list(annotations)
    if int(limit) < 1:
        raise ConfigError("rank.eval_dialogues", f"should be a positive number of dialogues, got {limit}")
    ids = sorted(
        dict.fromkeys(a.dialogue_id for a in annotations),
        key=lambda d: hashlib.sha256(f"sample:{seed}:{d}".encode()).hexdigest(),
    )
    keep = set(ids[: int(limit)])
    return [a for a in annotations if a.dialogue_id in keep]


def scores_from_files(paths: Sequence[Path]) -> tuple[dict[tuple[str, str], int | None], list[str]]:
    """({(dialogue, dimension): score or None (invalid, failed)}, the judges' names) from rank.py
    score files."""
    records = latest(r for p in paths for r in read_scores(p))
    if not records:
        raise UserError(f"no score records in {', '.join(map(str, paths))}")
    judges = sorted({r.judge for r in records.values()})
    return {key: (r.score if r.status == VALID else None) for key, r in records.items()}, judges


def write_agreement(out: Path, results: Sequence[agree.Agreement], title: str) -> str:
    """OUT/agreement.{md,csv,json}; returns the markdown."""
    report = agree.to_markdown([*results, *agree.mean_rows(results)], title=title)
    (out / "agreement.md").write_text(report, encoding="utf-8")
    agree.write_csv(results, out / "agreement.csv")
    (out / "agreement.json").write_text(json.dumps(agree.summary(results), indent=2) + "\n", encoding="utf-8")
    return report


def coverage_warning(
    predicted: Mapping[tuple[str, str], Any], reference: Mapping[tuple[str, str], int]
) -> None:
    """Log how many annotated pairs the judge's scores do not cover (they count as invalid)."""
    missing = sum(1 for key in reference if key not in predicted)
    if missing:
        log.warning(
            "%d of %d annotated (dialogue, dimension) pairs have no judgment; counted as invalid",
            missing,
            len(reference),
        )
