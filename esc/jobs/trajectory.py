"""`rank.py mode=trajectory`: the seekers' emotion trajectories of evaluate.py runs, per target.

Reads the ratings evaluate.py stored with the dialogues (`trajectory.enabled=true`); judges nothing.
Writes trajectory.md / .csv / .json and charts/trajectory.png (`esc.reports.trajectory`), rebuilt
whole on every run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esc.dialogues.store import dialogue_files, read_dialogues
from esc.errors import ConfigError, UserError
from esc.lifecycle import Job, JobResult
from esc.reports.trajectory import rated_dialogues, write_report


@dataclasses.dataclass
class TrajectoryResult(JobResult):
    markdown: str = ""
    dialogues: int = 0
    chart: str | None = None

    def summary(self) -> str:
        return (
            f"{self.markdown}\n{self.dialogues} rated dialogues; "
            f"{self.output_dir}/trajectory.md (.csv, .json)"
            + (f", chart: {self.chart}" if self.chart else "")
        )


def run_trajectory(job: Job, resolved: Mapping[str, Any], out: Path, judge: Any = None) -> TrajectoryResult:
    if resolved.get("dialogues") in (None, "???"):
        raise ConfigError(
            "dialogues", "name the evaluate.py output directories (run with trajectory.enabled=true)"
        )
    files = dialogue_files(resolved["dialogues"])
    rated, unrated = rated_dialogues((d, str(path)) for path in files for d in read_dialogues(path))
    if not rated:
        raise UserError(
            f"no rated dialogue in {', '.join(map(str, files))}: play them with "
            "`python evaluate.py trajectory.enabled=true ...`"
        )
    section = resolved.get("trajectory") or {}
    n, seed = int(section.get("bootstrap", 1000)), int(resolved.get("seed", 0))
    report = write_report(out, rated, n, seed, bool(section.get("charts", True)), unrated)
    job.manifest.update(sources=[str(p) for p in files])
    result = TrajectoryResult(str(out), report["markdown"], len(rated), report["chart"])
    return job.complete(result, dialogues=len(rated), report=str(out / "trajectory.md"))
