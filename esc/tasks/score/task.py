"""`rank.py mode=score` and `mode=leaderboard` (`esc.rank.run` picks one): dialogues → judgments
on 7 dimensions → the Table 2 leaderboard, or the leaderboard alone from existing score files.

Resumable and kill-safe: judgments are appended to `OUT/scores/*.jsonl` as each chunk is judged
(`esc.scoring.judging`), and a rerun with the same output directory judges only what is missing or
failed. The leaderboard is rebuilt from the score files at the end of every run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from esc.config_rules import OpenSettings, Section
from esc.errors import ConfigError, UserError
from esc.lifecycle import WITH_FAILURES, JobResult
from esc.reports import breakdown
from esc.reports.result import Block, Report, write_result
from esc.reports.wandb_report import log_run
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.judging import (
    check_one_prompt_per_judge,
    invalid_report,
    load_items,
    score_batch,
    selected_dimensions,
)
from esc.scoring.jury import JurySettings
from esc.scoring.rubrics import labelled_counts
from esc.scoring.store import ScoreRecord, merge_score_files, score_file_paths, score_inputs
from esc.settings.types import Paths
from esc.tasks.score import jury as jury_report
from esc.tasks.score import leaderboard as board
from esc.tasks.score import simulators
from esc.tasks.score.jury import pooled_records
from esc.tasks.score.simulators import simulator_tables
from esc.tasks.task import Context, LeaderboardSettings, Mode, Outcome, Plan, in_mode, register

log = logging.getLogger(__name__)


class NoValidJudgments(UserError):
    """A judge whose every judgment is invalid: the files are written (the reasons are in the score
    files), its leaderboard row is all n/a (a jury pools the others); exit code 1, after the summary,
    so that no script takes the run for a result."""

    exit_code = 1


@dataclasses.dataclass
class ScoreResult(JobResult):
    """mode=score and mode=leaderboard: the Table 2 leaderboard and the judgments behind it."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)  # this run's judgments
    judgments: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)  # all, per dimension
    markdown: str = ""
    charts: list[str] = dataclasses.field(default_factory=list)
    rows: list[Any] = dataclasses.field(default_factory=list)
    no_valid: str | None = None  # why a judge's row is all n/a (`invalid_judgments`)
    judged: bool = True  # False: mode=leaderboard, which reads score files and judges nothing

    def _by_dimension(self, status: str) -> dict[str, int]:
        return {k: v[status] for k, v in self.judgments.items() if v[status]}

    def summary(self) -> str:
        c = self.counts
        return "\n".join(
            [
                self.markdown,
                f"{c.get(VALID, 0)} valid, {c.get(INVALID, 0)} invalid, {c.get(FAILED, 0)} failed judgments "
                f"this run ({c.get('skipped', 0)} already done); invalid by dimension: "
                f"{labelled_counts(self._by_dimension(INVALID))}; failed: "
                f"{labelled_counts(self._by_dimension(FAILED))}",
                f"leaderboard: {self.output_dir}/leaderboard.md (.csv), charts: {', '.join(self.charts)}",
            ]
        )

    def incomplete(self) -> str | None:
        """The failed judgments the leaderboard's score files hold (this run's, in mode=score: a rerun
        retries every failed one; those of the files read, in mode=leaderboard, which judges nothing:
        their own folder's rerun retries them), or None."""
        failed = sum(self._by_dimension(FAILED).values()) or self.counts.get(FAILED, 0)
        if not failed:
            return None
        what = f"{failed} judgments failed (no answer came: {labelled_counts(self._by_dimension(FAILED))})"
        if self.judged:
            return f"{what}; rerun the same command to retry them"
        return (
            f"{what} in the score files read: rerun rank.py (mode=score) in the folders they came from to "
            "retry them, then this leaderboard"
        )

    @property
    def status(self) -> str:
        """Not `completed` where a judge gave no valid judgment (its row all n/a): the run exits 1."""
        return WITH_FAILURES if self.no_valid else super().status

    def refuse_if_unusable(self) -> None:
        """After the summary (rank.py): a NoValidJudgments (exit 1) when a judge gave no valid
        judgment."""
        if self.no_valid:
            raise NoValidJudgments(self.no_valid)


def invalid_judgments(records: Sequence[ScoreRecord]) -> str | None:
    """Say on the console what the score files hold: per judge with invalid judgments, a warning
    with the count and the first reason; the message of a judge with no valid judgment at all (its
    row is all n/a: every judgment invalid or failed), or None. Failed judgments are also the
    rerun's (`ScoreResult.incomplete`, which takes precedence: exit 3)."""
    by_judge: dict[str, list[ScoreRecord]] = {}
    for record in records:
        by_judge.setdefault(record.judge, []).append(record)
    unusable = []
    for name, own in by_judge.items():
        invalid = [r for r in own if r.status == INVALID]
        if any(r.status == VALID for r in own):
            if invalid:
                first = invalid[0]
                log.warning(
                    "%s of %s judgments by judge %r are invalid (first: %s, %s: %s); they are counted, never "
                    "averaged in", len(invalid), len(own), name, first.dialogue_id, first.dimension,
                    first.error or "no reason recorded",
                )  # fmt: skip
            continue
        failed = len(own) - len(invalid)
        first = (invalid or own)[0]
        parts = [f"{len(invalid)} of {len(own)} judgments by judge {name!r} are invalid"] if invalid else []
        if failed:
            parts.append(f"{failed} of {len(own)} failed (no answer came)")
        unusable.append(
            f"{' and '.join(parts)} (first: {first.dialogue_id}, {first.dimension}: "
            f"{first.error or 'no reason recorded'})"
        )
    if not unusable:
        return None
    return (
        f"no valid judgment: {'; '.join(unusable)}; its leaderboard row is all n/a (the reasons are in the "
        "score files): change the judge or its settings (e.g. judge.min_answer_mass) and judge into a new "
        "folder (hydra.run.dir=NEW_DIR)"
    )


def write_reports(
    out: Path, records: Sequence[ScoreRecord], settings: LeaderboardSettings, seed: int,
    jury: JurySettings | None = None,
) -> dict[str, Any]:  # fmt: skip
    """leaderboard.md, leaderboard.result.json and the tables' CSVs (leaderboard.csv: Table 2;
    simulators.csv) by `esc.reports.result.write_result` (the jury, several simulators and the
    breakdowns as sections after the table), charts. With a `jury`, the pooled records join
    the table (and the breakdowns) as judge `jury`."""
    n = settings.bootstrap
    jury_section: list[Block] = []
    if jury:
        members, pool, reading = jury.names, jury.pool, jury.reading
        judged = list(records)
        pooled = pooled_records(judged, members, pool, jury.min_valid, reading)
        records = [*judged, *pooled]  # the jury's row in Table 2 and in the breakdowns
        rows = board.leaderboard(records, n, seed)
        # the rankings order targets by point estimates: no resamples (0) for these rows
        on_reading = board.leaderboard([*jury_report.reading_records(judged, reading), *pooled], 0, seed)
        jury_section = jury_report.jury_blocks(
            jury_report.leniency(judged, members, reading, n, seed),
            jury_report.agreement_between_judges(judged, members, reading, n, seed),
            jury_report.rankings(on_reading, members), pool, members, reading,
        )  # fmt: skip
    else:
        rows = board.leaderboard(records, n, seed)
    blocks = [*board.leaderboard_blocks(rows, n, seed), *jury_section]
    tables = simulator_tables(records, n, seed)
    if tables:
        blocks += simulators.simulator_blocks(tables)
    markdown = Report("leaderboard", tuple(blocks)).to_markdown()  # the console's: without the breakdowns
    if settings.breakdowns:  # docs/scoring.md, "Breakdowns": after the leaderboard in its file
        blocks += breakdown.breakdown_sections(records, settings.cards, settings.min_n, n, seed)
    write_result(out, Report("leaderboard", tuple(blocks)))  # leaderboard.csv: its first table
    charts = board.write_charts(rows, out / "charts") if settings.charts else []
    return {"rows": rows, "markdown": markdown, "charts": [str(p) for p in charts]}


@register
class Score(Mode):
    """Judge the dialogues on the 7 dimensions, then the leaderboard. A jury (`jury=...`) judges
    with each member, then pools."""

    name = "score"
    reads_dialogues = True
    takes_jury = True
    reports = ("leaderboard",)
    stores = (("scores/*.jsonl", ScoreRecord),)

    def plan(self, ctx: Context) -> Plan:
        files = ctx.dialogue_files(distinct_names=True)
        dims = selected_dimensions(ctx.run.dimensions)
        found = [load_items(path, dims) for path in files]  # bad input stops here, before any judging
        batches = [
            score_batch(judge, path, items, ctx.out / "scores" / f"{path.stem}__{judge.name}.jsonl")
            for judge in ctx.judges
            for path, items in zip(files, found, strict=True)
        ]
        return Plan(batches, {"sources": [str(p) for p in files]})

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        paths = sorted((ctx.out / "scores").glob("*.jsonl"))
        return leaderboard_outcome(ctx, paths, dict(ctx.counts))


class ScoreFiles(OpenSettings):
    """mode=leaderboard's `scores`: the score files it reports."""

    scores: Paths = Field(description="rank.py output dirs or score files")


@register
class Leaderboard(Mode):
    """The leaderboard alone, from existing score files (`scores`): several runs, or a jury's
    members' files pooled by name."""

    name = "leaderboard"
    judges = False
    takes_jury = True
    reports = ("leaderboard",)
    config = (Section("", ScoreFiles, when=in_mode("leaderboard")),)

    def site_sources(self, out: Path, cfg: Mapping[str, Any]) -> list[Path]:
        """OUT (the leaderboard.md this run wrote), and the rank.py folders whose score files it read
        (`scores`: folders, or files under a folder's `scores/`). A score file elsewhere (copied
        out, imported) is in no rank.py folder: its judgments are on OUT's leaderboard page only."""
        folders = []
        for path in score_file_paths(cfg["scores"], "scores"):
            folder = path.parent.parent
            if path.parent.name == "scores" and folder not in folders:
                folders.append(folder)
        return [out, *folders]

    def plan(self, ctx: Context) -> Plan:
        return Plan(data=score_inputs(ctx.run.scores))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        return leaderboard_outcome(ctx, plan.data, {}, judged=False)


def leaderboard_outcome(
    ctx: Context, score_paths: Sequence[Path], counts: dict[str, int], judged: bool = True
) -> Outcome:
    """The leaderboard of the score files (`write_reports`), and the run's result; `judged`: False
    for mode=leaderboard (it judged nothing: its failed judgments are retried in their folders)."""
    out = ctx.out
    records = merge_score_files(score_paths)
    if not records:
        raise UserError(f"no score records in {', '.join(map(str, score_paths)) or out / 'scores'}")
    check_one_prompt_per_judge(records, score_paths)
    jury: JurySettings | None = ctx.sections.get("jury")
    members = jury.names if jury else []  # a jury's judges, by name: judged now, or in the score files read
    missing = sorted(set(members) - {r.judge for r in records})
    if missing:
        raise ConfigError(
            "jury.members", f"no score of judge(s) {missing} in {', '.join(map(str, score_paths))}"
        )
    reports = write_reports(out, records, ctx.section("leaderboard"), ctx.seed, jury)
    by_dimension = invalid_report(records)
    wandb_dir = log_run(out, ctx.section("wandb"), ctx.cfg, reports["charts"], records)
    no_valid = invalid_judgments(records)
    result = ScoreResult(str(out), counts, by_dimension, **reports, no_valid=no_valid, judged=judged)
    manifest = {
        "wandb_dir": wandb_dir,
        "counts": counts,
        "judgments": by_dimension,
        "leaderboard": str(out / "leaderboard.md"),
        "charts": reports["charts"],
        **({"no_valid_judgments": no_valid} if no_valid else {}),
    }
    return Outcome(result, manifest)
