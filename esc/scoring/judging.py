"""Judging a set of items into a score file: resumable, in chunks, with progress.

`score_files` judges the dialogues of evaluate.py output files on the chosen dimensions (rank.py
mode=score); `judge_items` judges any list of items (annotated dialogues, role-play questions).
Both append each chunk's judgments as they come and skip what the score file already holds for the
same text, so a rerun judges only what is missing or failed.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esc.chat.cost import CostEstimate, CostPart, count_prompt
from esc.dialogues.record import dialogue_lines
from esc.dialogues.store import read_dialogues
from esc.errors import ConfigError, DataError, UserError
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


def selected_dimensions(value: Any) -> list[str]:
    if value in (None, "all"):
        return list(DIMENSION_KEYS)
    if isinstance(value, str):
        value = [value]
    keys = [dimension(v, "config `dimensions`").key for v in value]
    if not keys:
        raise ConfigError("dimensions", "is empty")
    return keys


#: per dialogue file: its score file and the (item, record fields) still to judge in it
ScorePlan = list[tuple[ScoreStore, list[tuple[ScoreItem, dict[str, Any]]]]]


def score_plan(out: Path, judge: Judge, sources: Sequence[Path], dims: Sequence[str],
               counts: Counter | None = None) -> ScorePlan:  # fmt: skip
    """What `score_files` would judge: for each of `sources`, its score file
    (OUT/scores/<file>__<judge>.jsonl) and the (dialogue, dimension) items not yet judged there on
    the same text; `counts["skipped"]` gets the others."""
    counts = Counter() if counts is None else counts
    plan = []
    for path in sources:
        store = ScoreStore(out / "scores" / f"{path.stem}__{judge.name}.jsonl")
        items = load_items(path, dims)
        asked = judge.prompt_identity
        pending = [
            (item, f)
            for item, f in items
            if not store.is_done((item.item_id, item.dimension), item.content_sha, asked)
        ]
        changed = sum(store.changed((it.item_id, it.dimension), it.content_sha) for it, _ in pending)
        if changed:
            log.warning("%s: %d judgments were made on other dialogue text: judged again", path, changed)
        reworded = sum(store.asked_otherwise((it.item_id, it.dimension), asked) for it, _ in pending)
        if reworded:
            log.warning("%s: %d judgments were asked with another rubric text: judged again", path, reworded)
        counts["skipped"] += len(items) - len(pending)
        plan.append((store, pending))
    return plan


def score_files(out: Path, judge: Judge, sources: Sequence[Path], dims: Sequence[str], chunk: int,
                progress: bool, counts: Counter | None = None,
                plan: ScorePlan | None = None) -> Counter:  # fmt: skip
    """Judge every pending (dialogue, dimension) of `sources`; append to OUT/scores as it goes.
    `counts` (valid, invalid, failed, skipped) is updated as each chunk is written, so that a run
    stopped halfway can say how far it got. `plan`: `score_plan`'s (its skipped items already
    counted), when the caller made it first, e.g. to estimate the cost (`estimate_items`)."""
    counts = Counter() if counts is None else counts
    if plan is None:
        plan = score_plan(out, judge, sources, dims, counts)
    total = sum(len(p) for _, p in plan)
    prompt = judge.prompt_identity
    desc = f"judge {judge.name}: dialogue x dimension"
    with Progress(total, "score", desc, enabled=progress) as bar:
        for store, pending in plan:
            for start in range(0, len(pending), chunk):
                part = pending[start : start + chunk]
                judgments = judge.judge([item for item, _ in part])
                records = [
                    ScoreRecord.make(
                        j, judge=judge.name, prompt=prompt, content_sha=item.content_sha, **fields
                    )
                    for (item, fields), j in zip(part, judgments, strict=True)
                ]
                store.add(records)
                counts.update(r.status for r in records)
                bar.update(len(part), invalid=counts[INVALID], failed=counts[FAILED])
    return counts


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
    return [
        item
        for item in items
        if not store.is_done(
            (item.item_id, item.dimension), item.content_sha, rubric if item.messages is None else None
        )
    ]


def estimate_items(judge: Judge, items: Sequence[ScoreItem]) -> CostEstimate | None:
    """What judging `items` with `judge` would cost, before any request (`esc.chat.cost`): one
    request per item, its prompt as the judge sends it (`item.prompt(judge.style,
    judge.default_system)`) counted, its reply at the judge's `settings.max_new_tokens` (an upper
    bound). Pass only the items still to judge (`pending_items`, `score_plan`). None when the judge
    has no price: a local judge, or an API judge whose `backend.price` is not set. Several judges
    (a jury) or item sets (pairwise items in both orders are items like any): add the estimates
    with `CostEstimate.total`. Every mode that judges hands its estimate to
    `esc.chat.cost.before_spending` before judging."""
    backend = getattr(judge, "backend", None)
    if backend is None or not backend.price:
        return None
    settings = getattr(judge, "settings", None)
    completion = settings.max_new_tokens if settings is not None else 1
    part = CostPart(f"judge {judge.name}", backend.price)
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


def judge_items(
    judge: Judge, items: Sequence[ScoreItem], store: ScoreStore, chunk: int = 32, progress: bool = True,
    what: str = "item", unit: str = "judgment",
) -> dict[tuple[str, str], ScoreRecord]:  # fmt: skip
    """Judge each item not yet in `store` (appending as it goes); every record of the store; the
    progress says `judge NAME: what` and counts `unit`s. Each
    record names the prompt it was asked with: the judge's rubric style and version, or the item's
    own `question` (role-play metrics, safety, pairwise: the question file and its version)."""
    rubric = judge.prompt_identity
    pending = pending_items(items, store, rubric)
    with Progress(len(pending), unit, f"judge {judge.name}: {what}", enabled=progress) as bar:
        for start in range(0, len(pending), chunk):
            part = pending[start : start + chunk]
            store.add(
                store.record_type.make(
                    j,
                    dialogue_id=it.item_id,
                    dimension=it.dimension,
                    language=it.language,
                    judge=judge.name,
                    prompt=_asked(it, rubric),
                    content_sha=it.content_sha,
                )
                for it, j in zip(part, judge.judge(part), strict=True)
            )
            bar.update(len(part))
    return dict(store.records)
