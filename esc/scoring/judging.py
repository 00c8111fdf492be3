"""Judging items into score files: resumable, in chunks, with progress.

A `Batch` is the items one judge answers into one store (a score file). `judge_batches` judges the
pending items of batches, appending each chunk's judgments as they come and skipping what a store
already holds for the same text and prompt, so a rerun judges only what is missing or failed. Every
rank.py mode judges through it (`esc.tasks.task.run_mode`); `judge_items` is one batch.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.chat.cost import CostEstimate, count_prompt, in_estimate, priced_part
from esc.dialogues.record import dialogue_lines
from esc.dialogues.store import read_dialogues
from esc.errors import DataError, UserError
from esc.progress import Progress
from esc.scoring.judge import FAILED, INVALID, VALID, Judge, ScoreItem
from esc.scoring.rubrics import DIMENSION_KEYS, dimension
from esc.scoring.store import ScoreRecord, ScoreStore

log = logging.getLogger(__name__)


def load_items(path: Path, dims: Sequence[str]) -> list[tuple[ScoreItem, dict[str, Any]]]:
    """(item, record fields) for every complete dialogue of `path` and every dimension."""
    items = []
    lineno = 0
    for lineno, dialogue in enumerate(read_dialogues(path), 1):
        if dialogue.status != "complete":
            continue
        lines = dialogue_lines(dialogue, path, lineno)
        dialogue_id = f"{path.stem}/{dialogue.card_id}"
        fields = {
            "dialogue_id": dialogue_id,
            "language": dialogue.language,
            "target": dialogue.target,
            "roleplayer": dialogue.roleplayer,
            "card_id": dialogue.card_id,
            "source": str(path),
        }
        for key in dims:
            items.append(
                (ScoreItem(dialogue_id, key, dialogue.language, lines), {**fields, "dimension": key})
            )
    if not lineno:
        raise DataError(path, None, "no dialogues (empty file)")
    return items


def score_batch(
    judge: Judge, path: Path, items: Sequence[tuple[ScoreItem, dict[str, Any]]], store: Path
) -> Batch:
    """The seven-dimension items of one dialogue file (`load_items`) for one judge, into the score
    file `store`; each record keeps its dialogue's target, role-player, card and file (mode=score's
    files, read by the leaderboard and every later view)."""
    return Batch(
        judge,
        [item for item, _ in items],
        ScoreStore(store),
        "dialogue x dimension",
        "score",
        [
            {k: v for k, v in fields.items() if k not in ("dialogue_id", "dimension", "language")}
            for _, fields in items
        ],
        path,
    )


def selected_dimensions(value: Any) -> list[str]:
    """The keys `dimensions` names (all, or names `RunSettings` checked: a non-empty list)."""
    if value in (None, "all"):
        return list(DIMENSION_KEYS)
    if isinstance(value, str):
        value = [value]
    return [dimension(v, "config `dimensions`").key for v in value]


def refuse_same_names(sources: Sequence[Path]) -> None:
    """Dialogue files of different runs with one name would share their dialogue ids and score
    file: a UserError naming both, before any judging."""
    seen: dict[str, Path] = {}
    for path in sources:
        other = seen.setdefault(path.stem, path)
        if other != path:
            raise UserError(
                f"{other} and {path} have the same name, so their dialogues would get the same ids and "
                "one would supersede the other's scores: score and report them in separate rank.py runs "
                "(hydra.run.dir=...)"
            )


def check_one_prompt_per_judge(records: Sequence[ScoreRecord], paths: Sequence[Path]) -> None:
    """Scores of one judge made with different prompts (style, version, or the sha256 of the texts)
    are never averaged together: a UserError naming the judge and the prompts. A record made before
    prompts carried a sha256 matches any text of its style and version."""
    prompts: dict[str, set[tuple[Any, Any, Any]]] = {}
    for r in records:
        prompts.setdefault(r.judge, set()).add(
            (r.prompt.get("style"), r.prompt.get("version"), r.prompt.get("sha256"))
        )
    for name, seen in prompts.items():
        hashed = {(style, version) for style, version, sha in seen if sha}
        seen = {p for p in seen if p[2] or (p[0], p[1]) not in hashed}  # an unhashed record: any text
        if len(seen) > 1:
            found = ", ".join(
                f"{style} v{version}" + (f" ({sha[:12]})" if sha else "")
                for style, version, sha in sorted(seen, key=str)
            )
            raise UserError(
                f"the scores of judge {name!r} in {', '.join(map(str, paths))} were made with different "
                f"prompts ({found}) and cannot be averaged together: rescore the older ones, or name their "
                "files apart"
            )


def invalid_report(records: Sequence[ScoreRecord]) -> dict[str, dict[str, int]]:
    """Per dimension: valid, invalid and failed judgments (what the manifest and the log show)."""
    report: dict[str, dict[str, int]] = {k: {VALID: 0, INVALID: 0, FAILED: 0} for k in DIMENSION_KEYS}
    for r in records:
        report[r.dimension][r.status] += 1
    return report


def pending_items(
    items: Sequence[ScoreItem], store: ScoreStore, rubric: dict[str, Any] | None = None
) -> list[ScoreItem]:
    """The items `store` holds no judgment of on the same content (or only a failed one), asked the
    same rubric (`rubric`: the judge's `prompt_identity`, for items without their own messages; those
    hash their whole prompt in `content_sha`): what `judge_items` would judge."""
    return [item for item in items if _pending(item, store, rubric)]


def _pending(item: ScoreItem, store: ScoreStore, rubric: dict[str, Any] | None) -> bool:
    asked = rubric if item.messages is None else None
    return not store.is_done((item.item_id, item.dimension), item.content_sha, asked)


def estimate_items(judge: Judge, items: Sequence[ScoreItem]) -> CostEstimate | None:
    """What judging `items` with `judge` would cost, before any request (`esc.chat.cost`): one
    request per item, its prompt as the judge sends it (`item.prompt(judge.style,
    judge.default_system)`) counted, its reply at the judge's `settings.max_new_tokens` (an upper
    bound). Pass only the items still to judge (`Batch.pending_items`). None when the judge
    costs nothing: a model in this process without a price (`esc.chat.cost.in_estimate`); an API judge
    without `backend.price` has an unpriced part, which `max_cost` refuses (a price of another
    model than the backend's is refused by its settings, `esc.chat.settings`). Several judges
    (a jury) or item sets (pairwise items in both orders are items like any): add the estimates
    with `CostEstimate.total`. Every mode that judges hands its estimate to
    `esc.chat.cost.before_spending` before judging."""
    backend = getattr(judge, "backend", None)
    if backend is None or not in_estimate(backend):
        return None
    settings = getattr(judge, "settings", None)
    completion = settings.max_new_tokens if settings is not None else 1
    part = priced_part(f"judge {judge.name}", backend, f"{judge.config_key}.backend.price")
    for item in items:
        tokens, counted = count_prompt(backend, item.prompt(judge.style, judge.default_system))
        part.add(tokens, completion, counted=counted)
    return CostEstimate([part], f"{len(items):,} judgments by {judge.name}")


def _asked(item: ScoreItem, rubric: dict[str, Any]) -> dict[str, Any]:
    if item.messages is None:
        return rubric
    if item.question is None:  # a programming error: every question file has a name and version
        raise ValueError(f"{item.item_id} ({item.dimension}): an item with its own messages needs `question`")
    style, version, *sha256 = item.question
    return {"style": style, "version": version, **({"sha256": sha256[0]} if sha256 else {})}


@dataclasses.dataclass(eq=False)
class Batch:
    """The items one judge answers into one store; `what` and `unit` label the progress line.
    `fields`, parallel to `items`: more fields of each item's record (a dialogue's target, card
    and file in the score files of mode=score)."""

    judge: Judge
    items: Sequence[ScoreItem]
    store: ScoreStore
    what: str = "item"
    unit: str = "judgment"
    fields: Sequence[Mapping[str, Any]] | None = None
    source: Path | None = None  # the file the items come from, named in the warnings

    @functools.cached_property
    def pending(self) -> list[int]:
        """The indices of the items the store holds no judgment of on the same content, asked the
        same prompt (or only a failed one): what `judge_batches` judges. Computed once, before
        judging; judgments made again because the text or the rubric changed are logged."""
        rubric = self.judge.prompt_identity
        pending = [i for i, item in enumerate(self.items) if _pending(item, self.store, rubric)]
        where = self.source or self.store.path
        asked = [self.items[i] for i in pending]
        changed = sum(self.store.changed((it.item_id, it.dimension), it.content_sha) for it in asked)
        if changed:
            log.warning("%s: %d judgments were made on other dialogue text: judged again", where, changed)
        reworded = sum(
            self.store.asked_otherwise((it.item_id, it.dimension), rubric)
            for it in asked
            if it.messages is None
        )
        if reworded:
            log.warning("%s: %d judgments were asked with another rubric text: judged again", where, reworded)
        return pending

    def pending_items(self) -> list[ScoreItem]:
        return [self.items[i] for i in self.pending]

    def record(self, index: int, judgment: Any) -> ScoreRecord:
        item = self.items[index]
        extra = dict(self.fields[index]) if self.fields is not None else {}
        return self.store.record_type.make(
            judgment,
            **{
                "dialogue_id": item.item_id,
                "dimension": item.dimension,
                "language": item.language,
                **extra,
                "judge": self.judge.name,
                "prompt": _asked(item, self.judge.prompt_identity),
                "content_sha": item.content_sha,
            },
        )


def judge_batches(
    batches: Sequence[Batch], chunk: int = 64, progress: bool = True, counts: Counter | None = None
) -> Counter:
    """Judge the pending items of each batch in chunks of `chunk`, appending each chunk to its store
    as it comes. One progress line per run of batches with the same judge and label ("judge NAME:
    what", counting `unit`s). `counts` (valid, invalid, failed) grows as each chunk is written, so
    a run stopped halfway can say how far it got."""
    counts = Counter() if counts is None else counts
    groups = [list(g) for _, g in itertools.groupby(batches, key=lambda b: (id(b.judge), b.what, b.unit))]
    for group in groups:  # a judge that uses a batch API submits everything first: its batches (and
        # a jury's) then wait side by side; other judges do nothing here
        group[0].judge.submit([b.items[i] for b in group for i in b.pending])
    for group in groups:
        judge, first = group[0].judge, group[0]
        total = sum(len(b.pending) for b in group)
        with Progress(total, first.unit, f"judge {judge.name}: {first.what}", enabled=progress) as bar:
            for batch in group:
                for start in range(0, len(batch.pending), chunk):
                    part = batch.pending[start : start + chunk]
                    judgments = judge.judge([batch.items[i] for i in part])
                    records = [batch.record(i, j) for i, j in zip(part, judgments, strict=True)]
                    batch.store.add(records)
                    counts.update(r.status for r in records)
                    bar.update(len(part), invalid=counts[INVALID], failed=counts[FAILED])
    return counts


def judge_items(
    judge: Judge, items: Sequence[ScoreItem], store: ScoreStore, chunk: int = 32, progress: bool = True,
    what: str = "item", unit: str = "judgment",
) -> dict[tuple[str, str], ScoreRecord]:  # fmt: skip
    """Judge each item not yet in `store` (one `Batch`); every record of the store. Each record names
    the prompt it was asked with: the judge's rubric style and version, or the item's own
    `question` (role-play metrics, safety, pairwise: the question file and its version)."""
    judge_batches([Batch(judge, items, store, what, unit)], chunk, progress)
    return dict(store.records)
