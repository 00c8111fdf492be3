"""`rank.py mode=safety`: every reply of the chatbots under test against the safety checklist.

For each complete dialogue of `dialogues` and each reply of its target, one yes/no question per
checklist item (`esc.safety.checklist`), judged by any judge (answer distribution for local models,
constrained or strictly parsed for APIs) and appended to `OUT/safety/<dialogue file>__<judge>.jsonl`
as it goes; a rerun judges only what is missing, failed or changed. Then the report
(`esc.reports.safety`): flag rates per target and question with intervals by card, and every
flagged reply.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esc.chat.cost import before_spending
from esc.dialogues.store import dialogue_files, read_dialogues
from esc.errors import ConfigError, UserError
from esc.jobs.answered import AnsweredResult
from esc.lifecycle import Job
from esc.reports.safety import Answer, write_report
from esc.rundir import resolved_revision
from esc.safety.checklist import SafetyRecord, replies, safety_items, selected_questions
from esc.scoring.judge import FAILED, INVALID, VALID, Judge
from esc.scoring.judging import estimate_items, judge_items, pending_items, refuse_same_names
from esc.scoring.store import ScoreStore


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


def run_safety(job: Job, resolved: Mapping[str, Any], out: Path, judge: Judge) -> SafetyResult:
    if resolved.get("dialogues") in (None, "???"):
        raise ConfigError("dialogues", "name the evaluate.py output directories or dialogue files")
    section = dict(resolved.get("safety") or {})
    questions = selected_questions(section.get("questions"))
    files = dialogue_files(resolved["dialogues"])
    refuse_same_names(files)
    plan = []
    for path in files:
        found = []
        for lineno, dialogue in enumerate(read_dialogues(path), 1):
            if dialogue.status == "complete":
                found += [
                    (reply, safety_items(reply, lines, questions))
                    for reply, lines in replies(dialogue, path, lineno)
                ]
        plan.append((path, found))
    if not any(found for _, found in plan):
        raise UserError(f"no complete dialogue with a reply to check in {', '.join(map(str, files))}")
    judge.check_ready()
    job.folder.check_resolved({"judge": resolved_revision(judge.identity())})
    job.manifest.update(judge=judge.identity(), sources=[str(p) for p in files], questions=questions)
    scoring = resolved.get("scoring") or {}
    counts: Counter = Counter()
    job.on_stop(lambda: {"counts": dict(counts)})
    answers = []
    stores = {
        path: ScoreStore(out / "safety" / f"{path.stem}__{judge.name}.jsonl", SafetyRecord) for path in files
    }
    pending = [it for path, found in plan for _, its in found for it in pending_items(its, stores[path])]
    before_spending(estimate_items(judge, pending), resolved.get("max_cost"), job.manifest)
    counts["skipped"] = sum(len(its) for _, found in plan for _, its in found) - len(pending)
    for path, found in plan:
        store = stores[path]
        items = [item for _, its in found for item in its]
        judge_items(
            judge, items, store, int(scoring.get("chunk", 64)), bool(scoring.get("progress", True)),
            what=f"safety checklist of {path.stem}", unit="answer",
        )  # fmt: skip
        for reply, its in found:
            for item in its:
                record = store.records[(item.item_id, item.dimension)]
                answers.append(Answer(reply, item.dimension, record))
                counts[record.status] += 1
    n, seed = int(section.get("bootstrap", 1000)), int(resolved.get("seed", 0))
    report = write_report(out, answers, questions, n, seed)
    result = SafetyResult(
        str(out), report["markdown"], dict(counts), len({a.reply.item_id for a in answers}), report["flagged"]
    )
    return job.complete(result, counts=dict(counts), report=str(out / "safety.md"))
