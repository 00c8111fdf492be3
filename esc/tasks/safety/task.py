"""`rank.py mode=safety`: every reply of the chatbots under test against the safety checklist.

For each complete dialogue of `dialogues` and each reply of its target, one yes/no question per
checklist item (`esc.scoring.safety_checklist`), judged by any judge (answer distribution for local models,
constrained or strictly parsed for APIs) and appended to `OUT/safety/<dialogue file>__<judge>.jsonl`
as it goes; a rerun judges only what is missing, failed or changed. Then the report
(`esc.tasks.safety.report`): flag rates per target and question with intervals by card, and every
flagged reply.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from esc.config_rules import Section, Settings, check, show
from esc.dialogues.store import read_dialogues
from esc.errors import UserError
from esc.lifecycle import WITH_FAILURES
from esc.reports.runlog import Judgment
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.judging import Batch
from esc.scoring.safety_checklist import (
    SafetyRecord,
    checklist,
    checklist_digest,
    question_keys,
    replies,
    safety_items,
    selected_questions,
)
from esc.scoring.store import ScoreRecord, ScoreStore
from esc.settings.types import NonEmpty
from esc.tasks.answered import AnsweredResult
from esc.tasks.run_log import logged_reply
from esc.tasks.safety.report import Answer, write_report
from esc.tasks.task import Context, Mode, Outcome, Plan, register


@dataclasses.dataclass
class SafetyResult(AnsweredResult):
    replies: int = 0
    flagged: int = 0

    def summary(self) -> str:
        c = self.counts
        return (
            f"{self.markdown}\n{self.replies} replies, {c.get(VALID, 0)} valid, {c.get(INVALID, 0)} invalid, "
            f"{c.get(FAILED, 0)} failed answers; {self.flagged} flagged; "
            f"{self.output_dir}/safety.md, flagged.csv"
        )

    @property
    def no_valid(self) -> str | None:
        """Why every flag rate is n/a: the judge gave no valid answer (each invalid, or failed), or None."""
        c = self.counts
        if c.get(VALID, 0) or not (c.get(INVALID, 0) + c.get(FAILED, 0)):
            return None
        return (
            f"no valid answer: {c.get(INVALID, 0)} invalid and {c.get(FAILED, 0)} failed of "
            f"{c.get(INVALID, 0) + c.get(FAILED, 0)} answers (the judge's replies are in "
            f"{self.output_dir}/safety/*.jsonl), so every flag rate is n/a: change the judge or its "
            "settings and judge into a new folder (hydra.run.dir=NEW_DIR)"
        )

    @property
    def status(self) -> str:
        """Not `completed` where no answer was valid (the report is all n/a): the run exits 1."""
        return WITH_FAILURES if self.no_valid else super().status

    def refuse_if_unusable(self) -> None:
        """After the summary (rank.py): exit 1 when no answer was valid (everything is written)."""
        if self.no_valid:
            raise NoValidAnswers(self.no_valid)


class NoValidAnswers(UserError):
    """A safety run whose judge gave no valid answer: its report is all n/a; exit code 1."""

    exit_code = 1


QUESTIONS = tuple(question_keys())  # the checklist's keys (esc/scoring/safety_checklist.yaml)


def once_each(value: list[str]) -> str | None:
    """Why a list of names (questions, perturbations) must not repeat one, or None: each is judged,
    paid for and counted once, and a second listing judged and counted it twice."""
    twice = sorted({name for name in value if value.count(name) > 1})
    if not twice:
        return None
    return f"names {', '.join(twice)} twice; list each once (got {show(value)})"


class SafetySettings(Settings):
    """`safety` (conf/rank.yaml): the checklist's questions asked, the intervals' resamples."""

    questions: (
        Literal["all"] | None | Annotated[NonEmpty[Literal[QUESTIONS]], check(once_each, "each once")]  # type: ignore[valid-type]
    ) = Field(description="checklist keys")
    bootstrap: int = Field(ge=0)  # resamples by card for the flag rates' 95% intervals


@register
class Safety(Mode):
    name = "safety"
    reads_dialogues = True
    own_questions = True
    reports = ("safety",)
    config = (Section("safety", SafetySettings),)
    stores = (("safety/*.jsonl", SafetyRecord),)

    def judgment(self, record: ScoreRecord) -> Judgment:
        """A checklist answer about one reply (item id `<dialogue id>#<exchange>`): its dialogue, the
        exchange as the turn, the answer "yes" (flagged) or "no"."""
        return logged_reply(self.name, record, checklist()["answers"])

    def settings(self, sections: Mapping[str, Any]) -> dict[str, Any]:
        # the checklist's texts (each judgment's content hash covers its prompt too)
        return {"safety": {"checklist_sha256": checklist_digest()}}

    def plan(self, ctx: Context) -> Plan:
        questions = selected_questions(ctx.section("safety").questions)
        files = ctx.dialogue_files(distinct_names=True)
        found: list[tuple[Path, list]] = []
        for path in files:
            per_file = []
            for lineno, dialogue in enumerate(read_dialogues(path), 1):
                if dialogue.status == "complete":
                    per_file += [
                        (reply, safety_items(reply, lines, questions))
                        for reply, lines in replies(dialogue, path, lineno)
                    ]
            found.append((path, per_file))
        if not any(per_file for _, per_file in found):
            raise UserError(f"no complete dialogue with a reply to check in {', '.join(map(str, files))}")
        judge = ctx.judge
        batches = [
            Batch(
                judge,
                [item for _, its in per_file for item in its],
                ScoreStore(ctx.out / "safety" / f"{path.stem}__{judge.name}.jsonl", SafetyRecord),
                f"safety checklist of {path.stem}",
                "answer",
            )
            for path, per_file in found
        ]
        return Plan(batches, {"sources": [str(p) for p in files], "questions": questions}, (found, questions))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        found, questions = plan.data
        counts: Counter = Counter(skipped=ctx.counts["skipped"])
        answers = []
        for (_, per_file), batch in zip(found, plan.batches, strict=True):
            for reply, its in per_file:
                for item in its:
                    record = batch.store.records[(item.item_id, item.dimension)]
                    answers.append(Answer(reply, item.dimension, record))
                    counts[record.status] += 1
        report = write_report(ctx.out, answers, questions, ctx.section("safety").bootstrap, ctx.seed)
        replied = len({a.reply.item_id for a in answers})
        result = SafetyResult(str(ctx.out), report["markdown"], dict(counts), replied, report["flagged"])
        return Outcome(result, {"counts": dict(counts), "report": str(ctx.out / "safety.md")})
