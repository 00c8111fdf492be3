"""What the modes that ask a judge questions of their own (role-play, safety, pairwise) return."""

from __future__ import annotations

import dataclasses

from esc.lifecycle import JobResult
from esc.scoring.judge import FAILED


@dataclasses.dataclass
class AnsweredResult(JobResult):
    """The report's markdown and the answers by status (`valid`, `invalid`, `failed`, `skipped`)."""

    markdown: str = ""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def incomplete(self) -> str | None:
        if not self.counts.get(FAILED):
            return None
        return f"{self.counts[FAILED]} answers failed (no answer came); rerun the same command to retry them"
