"""The scoring modes of `rank.py` (`esc.jobs.rank` picks one): dialogues → judgments on 7
dimensions → leaderboard (mode=score), the leaderboard alone (mode=leaderboard), a judge against the
human scores (mode=agreement) and text metrics against them (mode=correlation).

Resumable and kill-safe: judgments are appended to `OUT/scores/*.jsonl` as each chunk is judged, and
a rerun with the same output directory judges only what is missing or failed. The leaderboard is
rebuilt from the score files at the end of every run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from esc.dialogues.record import dialogue_lines
from esc.dialogues.store import dialogue_files, read_dialogues
from esc.errors import ConfigError, DataError, UserError
from esc.jsonl import atomic_write_text
from esc.lifecycle import Job, JobResult
from esc.rundir import resolved_revision
from esc.scoring import agreement as agree
from esc.scoring import agreement_run
from esc.scoring import leaderboard as board
from esc.scoring.correlation import run_correlation
from esc.scoring.judge import FAILED, INVALID, VALID, Judge, ScoreItem
from esc.scoring.rubrics import DIMENSION_KEYS, dimension
from esc.scoring.store import ScoreRecord, ScoreStore, merge_score_files, score_file_paths
from esc.scoring.wandb_report import log_reports

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ScoreResult(JobResult):
    """mode=score and mode=leaderboard: the Table 2 leaderboard and the judgments behind it."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)  # this run's judgments
    judgments: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)  # all, per dimension
    markdown: str = ""
    charts: list[str] = dataclasses.field(default_factory=list)
    rows: list[Any] = dataclasses.field(default_factory=list)

    def _by_dimension(self, status: str) -> dict[str, int]:
        return {k: v[status] for k, v in self.judgments.items() if v[status]}

    def summary(self) -> str:
        c = self.counts
        return "\n".join(
            [
                self.markdown,
                f"{c.get(VALID, 0)} valid, {c.get(INVALID, 0)} invalid, {c.get(FAILED, 0)} failed judgments "
                f"this run ({c.get('skipped', 0)} already done); invalid by dimension: "
                f"{self._by_dimension(INVALID) or 'none'}; failed: {self._by_dimension(FAILED) or 'none'}",
                f"leaderboard: {self.output_dir}/leaderboard.md (.csv), charts: {', '.join(self.charts)}",
            ]
        )

    def incomplete(self) -> str | None:
        if not self.counts.get(FAILED):
            return None
        return (
            f"{self.counts[FAILED]} judgments failed (no answer came: {self._by_dimension(FAILED)}); rerun "
            "the same command to retry them"
        )


@dataclasses.dataclass
class AgreementResult(JobResult):
    """mode=agreement: the judge's (or the score files') agreement with people, and the baselines."""

    markdown: str = ""
    invalid: dict[str, int] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        invalid = {k: v for k, v in self.invalid.items() if v}
        return (
            f"{self.markdown}\ninvalid judgments by dimension: {invalid or 'none'}\n"
            f"agreement: {self.output_dir}/agreement.md (.csv, .json)"
        )


@dataclasses.dataclass
class CorrelationResult(JobResult):
    """mode=correlation: text metrics and judges against the human scores."""

    markdown: str = ""

    def summary(self) -> str:
        return f"{self.markdown}\ncorrelation: {self.output_dir}/correlation.md (.csv, .json)"


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


def score_files(out: Path, judge: Judge, sources: Sequence[Path], dims: Sequence[str], chunk: int,
                progress: bool, counts: Counter | None = None) -> Counter:  # fmt: skip
    """Judge every pending (dialogue, dimension) of `sources`; append to OUT/scores as it goes.
    `counts` (valid, invalid, failed, skipped) is updated as each chunk is written, so that a run
    stopped halfway can say how far it got."""
    counts = Counter() if counts is None else counts
    plan = []
    for path in sources:
        store = ScoreStore(out / "scores" / f"{path.stem}__{judge.name}.jsonl")
        items = load_items(path, dims)
        pending = [
            (item, f)
            for item, f in items
            if not store.is_done((item.item_id, item.dimension), item.content_sha)
        ]
        changed = sum(store.changed((it.item_id, it.dimension), it.content_sha) for it, _ in pending)
        if changed:
            log.warning("%s: %d judgments were made on other dialogue text: judged again", path, changed)
        counts["skipped"] += len(items) - len(pending)
        plan.append((store, pending))
    total = sum(len(p) for _, p in plan)
    prompt = {"style": judge.prompt, "version": judge.prompt_version}
    with tqdm(total=total, unit="score", desc=f"judge {judge.name}", disable=not progress) as bar:
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
                bar.update(len(part))
                bar.set_postfix(invalid=counts[INVALID], failed=counts[FAILED])
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
    """Scores of one judge made with different prompts (style or version) are never averaged
    together: a UserError naming the judge and the prompts."""
    prompts: dict[str, set[tuple[Any, Any]]] = {}
    for r in records:
        prompts.setdefault(r.judge, set()).add((r.prompt.get("style"), r.prompt.get("version")))
    for name, seen in prompts.items():
        if len(seen) > 1:
            found = ", ".join(f"{style} v{version}" for style, version in sorted(seen, key=str))
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


def write_reports(out: Path, records: Sequence[ScoreRecord], cfg: Mapping[str, Any]) -> dict[str, Any]:
    rows = board.leaderboard(records, int(cfg.get("bootstrap", 1000)), int(cfg.get("seed", 0)))
    markdown = board.to_markdown(rows)
    atomic_write_text(out / "leaderboard.md", markdown)
    board.write_csv(rows, out / "leaderboard.csv")
    charts = board.write_charts(rows, out / "charts") if cfg.get("charts", True) else []
    return {"rows": rows, "markdown": markdown, "charts": [str(p) for p in charts]}


def run_scores(job: Job, resolved: Mapping[str, Any], out: Path, judge: Judge | None) -> ScoreResult:
    """mode=score: judge the dialogues, then the leaderboard; mode=leaderboard: only the latter."""
    manifest = job.manifest
    counts: Counter = Counter()
    if judge is not None:
        if resolved.get("dialogues") in (None, "???"):
            raise ConfigError("dialogues", "name an evaluate.py output directory or dialogue files")
        dims = selected_dimensions(resolved.get("dimensions"))
        sources = dialogue_files(resolved["dialogues"])
        refuse_same_names(sources)
        for path in sources:  # bad input stops here, before any judging
            load_items(path, dims[:1])
        judge.check_ready()
        job.folder.check_resolved({"judge": resolved_revision(judge.identity())})
        manifest.update(judge=judge.identity(), sources=[str(p) for p in sources])
        scoring = resolved.get("scoring") or {}
        job.on_stop(lambda: {"counts": dict(counts)})  # a stopped run records how far it got
        score_files(out, judge, sources, dims, int(scoring.get("chunk", 64)),
                    bool(scoring.get("progress", True)), counts)  # fmt: skip
    score_paths = sorted((out / "scores").glob("*.jsonl")) if judge is not None else _score_inputs(resolved)
    records = merge_score_files(score_paths)
    if not records:
        raise UserError(f"no score records in {', '.join(map(str, score_paths)) or out / 'scores'}")
    check_one_prompt_per_judge(records, score_paths)
    reports = write_reports(
        out, records, {**(resolved.get("leaderboard") or {}), "seed": resolved.get("seed", 0)}
    )
    by_dimension = invalid_report(records)
    wandb_dir = _log_to_wandb(out, resolved, reports["charts"])
    result = ScoreResult(str(out), dict(counts), by_dimension, **reports)
    return job.complete(
        result,
        wandb_dir=wandb_dir,
        counts=dict(counts),
        judgments=by_dimension,
        leaderboard=str(out / "leaderboard.md"),
        charts=reports["charts"],
    )


def _score_inputs(resolved: Mapping[str, Any]) -> list[Path]:
    spec = resolved.get("scores")
    if not spec:
        raise ConfigError("scores", "name score files or rank.py output directories")
    return score_file_paths(spec, "scores")


def run_agreement(job: Job, resolved: Mapping[str, Any], out: Path, judge: Judge | None) -> AgreementResult:
    """mode=agreement: the judge (or the judges of existing `scores`) against the human annotations
    of one split, beside the baselines; a trained judge only on dialogues it did not learn from."""
    manifest = job.manifest
    section = dict(resolved.get("agreement") or {})
    data = {
        "annotations": section.get("annotations"),
        "dimensions": resolved.get("dimensions", "all"),
        "languages": section.get("languages") or ["en", "zh"],
        "split": section.get("split_ratios") or [7, 1, 2],
        "seed": section.get("split_seed", 42),
    }
    n_resamples, seed = int(section.get("bootstrap", 1000)), int(resolved.get("seed", 0))
    evaluated, train_part = agreement_run.split_annotations(data, section.get("split", "test"))
    rows: dict[str, Any] = {}
    if judge is None:
        paths = _score_inputs(resolved)
        rows, judges = agreement_run.scores_from_files(paths)
        for path in paths:  # score files of a rank.py folder: its judge's identity is in the manifest
            identity = agreement_run.folder_judge(path)
            evaluated = agreement_run.held_out(
                evaluated, agreement_run.trained_dialogues(identity), f"judge in {path}"
            )
        manifest.update(scores=[str(p) for p in paths])
        label = ", ".join(judges)
    else:
        judge.check_ready()
        job.folder.check_resolved({"judge": resolved_revision(judge.identity())})
        manifest.update(judge=judge.identity())
        evaluated = agreement_run.held_out(
            evaluated, agreement_run.trained_dialogues(judge.identity()), judge.name
        )
        store = ScoreStore(out / "scores" / f"annotations__{judge.name}.jsonl")
        scoring = resolved.get("scoring") or {}
        rows[judge.name] = agreement_run.judge_items(
            judge, agreement_run.annotated_items(evaluated), store, int(scoring.get("chunk", 64)),
            bool(scoring.get("progress", True)),
        )  # fmt: skip
        label = judge.name
    items = agreement_run.agreement_items(evaluated)
    for name, predicted in rows.items():
        agreement_run.coverage_warning(predicted, items, name)
    if section.get("baselines", True):
        rows.update(agreement_run.baselines(train_part, evaluated))
    tables = agree.agreement_tables(items, rows, n_resamples, seed)
    split = section.get("split", "test")
    title = f"{label} against people: {len(items)} annotated items ({split} split)"
    markdown = agreement_run.write_agreement(out, tables, title)
    invalid = {
        t.scope: r.n_invalid
        for t in tables
        if t.source == agree.ALL_SOURCES and t.scope in DIMENSION_KEYS
        for r in t.rows
        if r.reading == "argmax" and r.judge == next(iter(rows))
    }
    wandb_dir = _log_to_wandb(out, resolved)
    return job.complete(
        AgreementResult(str(out), markdown, invalid),
        agreement=str(out / "agreement.md"),
        invalid=invalid,
        wandb_dir=wandb_dir,
    )


def run_correlation_mode(
    job: Job, resolved: Mapping[str, Any], out: Path, judge: None = None
) -> CorrelationResult:
    """mode=correlation: text metrics and judges against the human scores (Tables 3, 13-15)."""

    section = {"seed": resolved.get("seed", 42), **(resolved.get("correlation") or {})}
    result = run_correlation(section, out)
    wandb_dir = _log_to_wandb(out, resolved)
    return job.complete(
        CorrelationResult(str(out), result["markdown"]),
        correlation=result["files"]["md"],
        warnings=result["warnings"],
        wandb_dir=wandb_dir,
    )


def _log_to_wandb(out: Path, resolved: Mapping[str, Any], charts: Sequence[str] = ()) -> str | None:
    settings = resolved.get("wandb") or {}
    if not settings.get("enabled"):
        return None

    return log_reports(out, settings, resolved, charts)
