"""`rank.py mode=agreement` and `mode=correlation`: a judge (or existing score files) against the
human scores of one split, beside the baselines; text metrics and judges against people."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esc.chat.cost import before_spending
from esc.jobs.score import score_inputs
from esc.lifecycle import Job, JobResult
from esc.reports import agreement as agree
from esc.reports import agreement_data, breakdown
from esc.reports.correlation import run_correlation
from esc.reports.wandb_report import log_run
from esc.rundir import resolved_revision
from esc.scoring.judge import Judge
from esc.scoring.judging import estimate_items, judge_items, pending_items
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreStore


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
    evaluated, train_part = agreement_data.split_annotations(data, section.get("split", "test"))
    rows: dict[str, Any] = {}
    if judge is None:
        paths = score_inputs(resolved)
        rows, judges = agreement_data.scores_from_files(paths)
        for path in paths:  # score files of a rank.py folder: its judge's identity is in the manifest
            identity = agreement_data.folder_judge(path)
            evaluated = agreement_data.held_out(
                evaluated, agreement_data.trained_dialogues(identity), f"judge in {path}"
            )
        manifest.update(scores=[str(p) for p in paths])
        label = ", ".join(judges)
    else:
        judge.check_ready()
        job.folder.check_resolved({"judge": resolved_revision(judge.identity())})
        manifest.update(judge=judge.identity())
        evaluated = agreement_data.held_out(
            evaluated, agreement_data.trained_dialogues(judge.identity()), judge.name
        )
        store = ScoreStore(out / "scores" / f"annotations__{judge.name}.jsonl")
        scoring = resolved.get("scoring") or {}
        annotated = agreement_data.annotated_items(evaluated)
        before_spending(
            estimate_items(judge, pending_items(annotated, store, judge.prompt_identity)),
            resolved.get("max_cost"),
            manifest,
        )
        records = judge_items(
            judge, annotated, store, int(scoring.get("chunk", 64)),
            bool(scoring.get("progress", True)), what="annotated dialogues", unit="score",
        )  # fmt: skip
        rows[judge.name] = agreement_data.predictions(records)
        label = judge.name
    items = agreement_data.agreement_items(evaluated)
    for name, predicted in rows.items():
        agreement_data.coverage_warning(predicted, items, name)
    if section.get("baselines", True):
        rows.update(agreement_data.baselines(train_part, evaluated))
    tables = agree.agreement_tables(items, rows, n_resamples, seed)
    split = section.get("split", "test")
    title = f"{label} against people: {len(items)} annotated items ({split} split)"
    sections = ""  # by language and turns (docs/scoring.md, "Breakdowns"), after the tables in agreement.md
    board = resolved.get("leaderboard") or {}
    if board.get("breakdowns", True):
        cuts = breakdown.agreement_breakdowns(
            items, rows, breakdown.annotation_facets(evaluated), int(board.get("min_n", breakdown.MIN_N)),
            n_resamples, seed, tables,
        )  # fmt: skip
        sections = breakdown.agreement_markdown(cuts)
    markdown = agreement_data.write_agreement(out, tables, title, extra=sections)
    invalid = {
        t.scope: r.n_invalid
        for t in tables
        if t.source == agree.ALL_SOURCES and t.scope in DIMENSION_KEYS
        for r in t.rows
        if r.reading == "argmax" and r.judge == next(iter(rows))
    }
    wandb_dir = log_run(out, resolved)
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
    wandb_dir = log_run(out, resolved)
    return job.complete(
        CorrelationResult(str(out), result["markdown"]),
        correlation=result["files"]["md"],
        warnings=result["warnings"],
        wandb_dir=wandb_dir,
    )
