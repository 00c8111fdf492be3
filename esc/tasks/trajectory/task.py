"""`rank.py mode=trajectory`: the seekers' emotion trajectories of evaluate.py runs, per target.

Reads the ratings evaluate.py stored with the dialogues (`trajectory.enabled=true`); judges nothing.
Writes trajectory.md, trajectory.result.json, the tables' CSVs (trajectory.csv: one row per dialogue)
and charts/trajectory.png (`esc.tasks.trajectory.report`), rebuilt whole on every run.
"""

from __future__ import annotations

import dataclasses

from pydantic import Field

from esc.config_rules import Section, Settings
from esc.dialogues.store import read_dialogues
from esc.errors import UserError
from esc.lifecycle import JobResult
from esc.tasks.task import Context, Mode, Outcome, Plan, register
from esc.tasks.trajectory.report import rated_dialogues, write_report


@dataclasses.dataclass
class TrajectoryResult(JobResult):
    markdown: str = ""
    dialogues: int = 0
    chart: str | None = None

    def summary(self) -> str:
        return (
            f"{self.markdown}\n{self.dialogues} rated dialogues; "
            f"{self.output_dir}/trajectory.md (.result.json, trajectory.csv)"
            + (f", chart: {self.chart}" if self.chart else "")
        )


class TrajectorySettings(Settings):
    """`trajectory` (conf/rank.yaml): the intervals' resamples, the chart."""

    bootstrap: int = Field(ge=0)  # resamples by card for the 95% intervals
    charts: bool  # OUT/charts/trajectory.png


@register
class Trajectory(Mode):
    name = "trajectory"
    reads_dialogues = True
    judges = False
    reports = ("trajectory",)
    config = (Section("trajectory", TrajectorySettings),)

    def plan(self, ctx: Context) -> Plan:
        files = ctx.dialogue_files()
        rated, unrated = rated_dialogues((d, str(path)) for path in files for d in read_dialogues(path))
        if not rated:
            raise UserError(
                f"no rated dialogue in {', '.join(map(str, files))}: play them with "
                "`python evaluate.py trajectory.enabled=true ...`"
            )
        return Plan([], {"sources": [str(p) for p in files]}, (rated, unrated))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        rated, unrated = plan.data
        section: TrajectorySettings = ctx.section("trajectory")
        report = write_report(ctx.out, rated, section.bootstrap, ctx.seed, section.charts, unrated)
        result = TrajectoryResult(str(ctx.out), report["markdown"], len(rated), report["chart"])
        return Outcome(result, {"dialogues": len(rated), "report": str(ctx.out / "trajectory.md")})
