"""`rank.py mode=score` and `mode=leaderboard` (`esc.jobs.rank` picks one): dialogues → judgments
on 7 dimensions → the Table 2 leaderboard, or the leaderboard alone from existing score files.

Resumable and kill-safe: judgments are appended to `OUT/scores/*.jsonl` as each chunk is judged
(`esc.scoring.judging`), and a rerun with the same output directory judges only what is missing or
failed. The leaderboard is rebuilt from the score files at the end of every run.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.dialogues.store import dialogue_files
from esc.errors import ConfigError, UserError
from esc.jsonl import atomic_write_text
from esc.lifecycle import Job, JobResult
from esc.reports import leaderboard as board
from esc.reports.wandb_report import log_run
from esc.rundir import resolved_revision
from esc.scoring.judge import FAILED, INVALID, VALID, Judge
from esc.scoring.judging import (
    check_one_prompt_per_judge,
    invalid_report,
    load_items,
    refuse_same_names,
    score_files,
    selected_dimensions,
)
from esc.scoring.store import ScoreRecord, merge_score_files, score_file_paths


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
    score_paths = sorted((out / "scores").glob("*.jsonl")) if judge is not None else score_inputs(resolved)
    records = merge_score_files(score_paths)
    if not records:
        raise UserError(f"no score records in {', '.join(map(str, score_paths)) or out / 'scores'}")
    check_one_prompt_per_judge(records, score_paths)
    reports = write_reports(
        out, records, {**(resolved.get("leaderboard") or {}), "seed": resolved.get("seed", 0)}
    )
    by_dimension = invalid_report(records)
    wandb_dir = log_run(out, resolved, reports["charts"])
    result = ScoreResult(str(out), dict(counts), by_dimension, **reports)
    return job.complete(
        result,
        wandb_dir=wandb_dir,
        counts=dict(counts),
        judgments=by_dimension,
        leaderboard=str(out / "leaderboard.md"),
        charts=reports["charts"],
    )


def score_inputs(resolved: Mapping[str, Any]) -> list[Path]:
    spec = resolved.get("scores")
    if not spec:
        raise ConfigError("scores", "name score files or rank.py output directories")
    return score_file_paths(spec, "scores")
