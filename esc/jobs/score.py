"""`rank.py mode=score` and `mode=leaderboard` (`esc.jobs.rank` picks one): dialogues → judgments
on 7 dimensions → the Table 2 leaderboard, or the leaderboard alone from existing score files.

Resumable and kill-safe: judgments are appended to `OUT/scores/*.jsonl` as each chunk is judged
(`esc.scoring.judging`), and a rerun with the same output directory judges only what is missing or
failed. The leaderboard is rebuilt from the score files at the end of every run.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.chat.cost import CostEstimate, before_spending
from esc.dialogues.store import dialogue_files
from esc.errors import ConfigError, UserError
from esc.jsonl import atomic_write_text
from esc.lifecycle import Job, JobResult
from esc.reports import breakdown, simulators
from esc.reports import jury as jury_report
from esc.reports import leaderboard as board
from esc.reports.jury import jury_names, pooled_records
from esc.reports.simulators import simulator_tables
from esc.reports.wandb_report import log_run
from esc.rundir import resolved_revision
from esc.scoring.judge import FAILED, INVALID, VALID, Judge
from esc.scoring.judging import (
    check_one_prompt_per_judge,
    estimate_items,
    invalid_report,
    load_items,
    refuse_same_names,
    score_files,
    score_plan,
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


def write_reports(
    out: Path, records: Sequence[ScoreRecord], cfg: Mapping[str, Any], jury: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """leaderboard.md (the table; the jury, several simulators and the breakdowns as sections after
    it), leaderboard.csv, charts. With a `jury` (its `members`' names, `pool`, `min_valid`, `reading`),
    the pooled records join the table (and the breakdowns) as judge `jury`."""
    n, seed = int(cfg.get("bootstrap", 1000)), int(cfg.get("seed", 0))
    jury_section = ""
    if jury:
        members = list(jury["members"])
        pool, reading = jury.get("pool", "mean"), jury.get("reading", "expected")
        judged = list(records)
        pooled = pooled_records(judged, members, pool, jury.get("min_valid"), reading)
        records = [*judged, *pooled]  # the jury's row in Table 2 and in the breakdowns
        rows = board.leaderboard(records, n, seed)
        # the rankings order targets by point estimates: no resamples (0) for these rows
        on_reading = board.leaderboard([*jury_report.reading_records(judged, reading), *pooled], 0, seed)
        jury_section = jury_report.to_markdown(
            jury_report.leniency(judged, members, pool, reading, n, seed),
            jury_report.agreement(judged, members, reading, n, seed),
            jury_report.rankings(on_reading, members), pool, members, reading,
        )  # fmt: skip
    else:
        rows = board.leaderboard(records, n, seed)
    markdown = board.to_markdown(rows) + ("\n" + jury_section if jury_section else "")
    tables = simulator_tables(records, n, seed)
    if tables:
        markdown += simulators.to_markdown(tables)
        atomic_write_text(out / "simulators.json", json.dumps(simulators.to_json(tables), indent=1) + "\n")
    sections = ""  # the breakdowns (docs/scoring.md, "Breakdowns"), after the leaderboard in its file
    if cfg.get("breakdowns", True):
        sections = breakdown.write_breakdowns(
            out, records, cfg.get("cards"), int(cfg.get("min_n", breakdown.MIN_N)), n, seed
        )
    atomic_write_text(out / "leaderboard.md", markdown + sections)
    board.write_csv(rows, out / "leaderboard.csv")
    charts = board.write_charts(rows, out / "charts") if cfg.get("charts", True) else []
    return {"rows": rows, "markdown": markdown, "charts": [str(p) for p in charts]}


def run_scores(
    job: Job, resolved: Mapping[str, Any], out: Path, judge: Judge | Sequence[Judge] | None
) -> ScoreResult:
    """mode=score: judge the dialogues, then the leaderboard; mode=leaderboard: only the latter. A
    jury (a list of judges, `esc.jobs.rank.jury_members`) judges with each, then pools."""
    manifest = job.manifest
    counts: Counter = Counter()
    judges = list(judge) if isinstance(judge, list | tuple) else [judge] if judge is not None else []
    if judges:
        if resolved.get("dialogues") in (None, "???"):
            raise ConfigError("dialogues", "name an evaluate.py output directory or dialogue files")
        dims = selected_dimensions(resolved.get("dimensions"))
        sources = dialogue_files(resolved["dialogues"])
        refuse_same_names(sources)
        for path in sources:  # bad input stops here, before any judging
            load_items(path, dims[:1])
        for each in judges:
            each.check_ready()
        revisions = {each.name: resolved_revision(each.identity()) for each in judges}
        job.folder.check_resolved({"judge": revisions.popitem()[1]} if len(judges) == 1 else revisions)
        identities = [each.identity() for each in judges]
        manifest.update(
            judge=identities[0] if len(judges) == 1 else identities, sources=[str(p) for p in sources]
        )
        scoring = resolved.get("scoring") or {}
        job.on_stop(lambda: {"counts": dict(counts)})  # a stopped run records how far it got
        plans = [score_plan(out, each, sources, dims, counts) for each in judges]
        estimates = [
            estimate_items(each, [item for _, items in plan for item, _ in items])
            for each, plan in zip(judges, plans, strict=True)
        ]
        before_spending(CostEstimate.total(estimates), resolved.get("max_cost"), manifest)
        for each, plan in zip(judges, plans, strict=True):
            score_files(out, each, sources, dims, int(scoring.get("chunk", 64)),
                        bool(scoring.get("progress", True)), counts, plan)  # fmt: skip
    score_paths = sorted((out / "scores").glob("*.jsonl")) if judges else score_inputs(resolved)
    records = merge_score_files(score_paths)
    if not records:
        raise UserError(f"no score records in {', '.join(map(str, score_paths)) or out / 'scores'}")
    check_one_prompt_per_judge(records, score_paths)
    jury = resolved.get("jury") or {}
    members = jury_names(jury)  # a jury's judges, by name: judged now, or in the score files read
    missing = sorted(set(members) - {r.judge for r in records})
    if missing:
        raise ConfigError(
            "jury.members", f"no score of judge(s) {missing} in {', '.join(map(str, score_paths))}"
        )
    reports = write_reports(
        out, records, {**(resolved.get("leaderboard") or {}), "seed": resolved.get("seed", 0)},
        {**jury, "members": members} if members else None,
    )  # fmt: skip
    by_dimension = invalid_report(records)
    wandb_dir = log_run(out, resolved, reports["charts"], records)
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
