"""`rank.py mode=pairwise`: one judge prefers one of two chatbots, card by card, in both orders.

The dialogue files of `dialogues` (two or more evaluate.py runs, or files) are matched by role-player
and card; every pair of targets that played a card gets one item per dimension and order
(`esc.scoring.pairwise`), judged by any judge (answer distribution over A/B/C for local models,
constrained or strictly parsed for APIs) and appended to `OUT/pairwise/<judge>.jsonl` as it goes; a
rerun judges only what is missing, failed or changed. Then the report (`esc.reports.pairwise`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esc.chat.cost import before_spending
from esc.dialogues.record import dialogue_lines
from esc.dialogues.store import dialogue_files, read_dialogues
from esc.errors import ConfigError, UserError
from esc.jobs.answered import AnsweredResult
from esc.lifecycle import Job
from esc.reports.pairwise import PRIOR, Judged, dropped_cards, write_report
from esc.rundir import resolved_revision
from esc.scoring.judge import FAILED, INVALID, VALID, Judge
from esc.scoring.judging import (
    estimate_items,
    judge_items,
    pending_items,
    refuse_same_names,
    selected_dimensions,
)
from esc.scoring.pairwise import ORDERS, PairwiseRecord, pair_items, pairs, verdict
from esc.scoring.store import ScoreStore


@dataclasses.dataclass
class PairwiseResult(AnsweredResult):
    pairs: int = 0

    def summary(self) -> str:
        c = self.counts
        return (
            f"{self.markdown}\n{self.pairs} pairs x dimensions; answers: {c.get(VALID, 0)} valid, "
            f"{c.get(INVALID, 0)} invalid, {c.get(FAILED, 0)} failed (of them {c.get('skipped', 0)} "
            "judged by an earlier run); "
            f"{self.output_dir}/pairwise.md, strengths.csv, verdicts.csv"
        )


def run_pairwise(job: Job, resolved: Mapping[str, Any], out: Path, judge: Judge) -> PairwiseResult:
    if resolved.get("dialogues") in (None, "???"):
        raise ConfigError("dialogues", "name two or more evaluate.py output directories (one per target)")
    files = dialogue_files(resolved["dialogues"])
    refuse_same_names(files)
    dims = selected_dimensions(resolved.get("dimensions"))
    dialogues = []
    for path in files:
        for lineno, dialogue in enumerate(read_dialogues(path), 1):
            if dialogue.status == "complete":
                dialogue_lines(dialogue, path, lineno)  # the checks score and safety make: turns alternate
            dialogues.append(dialogue)
    found = pairs(dialogues)
    played: Counter = Counter(
        (d.roleplayer, d.language, d.card_id) for d in dialogues if d.status == "complete"
    )
    if not found:
        raise UserError(
            f"no card played by two targets with the same role-player in {', '.join(map(str, files))}: "
            "pairwise compares runs of different targets on the same cards"
        )
    items = [item for pair in found for item in pair_items(pair, dims)]
    judge.check_ready()
    job.folder.check_resolved({"judge": resolved_revision(judge.identity())})
    job.manifest.update(judge=judge.identity(), sources=[str(p) for p in files], pairs=len(found))
    store = ScoreStore(out / "pairwise" / f"{judge.name}.jsonl", PairwiseRecord)
    pending = pending_items(items, store)
    before_spending(estimate_items(judge, pending), resolved.get("max_cost"), job.manifest)  # both orders
    counts: Counter = Counter(skipped=len(items) - len(pending))
    job.on_stop(lambda: {"counts": dict(counts)})
    scoring = resolved.get("scoring") or {}
    records = judge_items(
        judge, items, store, int(scoring.get("chunk", 64)), bool(scoring.get("progress", True)),
        what="pairs of dialogues, both orders", unit="verdict",
    )  # fmt: skip
    judged = []
    for pair in found:
        for key in dims:
            answers = {o: records.get((f"{pair.pair_id}/{o}", key)) for o in ORDERS}
            for record in answers.values():
                counts[record.status if record is not None else FAILED] += 1
            judged.append(Judged(pair, key, verdict(pair, answers)))
    section = resolved.get("pairwise") or {}
    n, seed = int(section.get("bootstrap", 1000)), int(resolved.get("seed", 0))
    dropped = dropped_cards(played)
    report = write_report(out, judged, dims, judge.name, n, seed, dropped, float(section.get("prior", PRIOR)))
    result = PairwiseResult(str(out), report["markdown"], dict(counts), len(judged))
    return job.complete(result, counts=dict(counts), report=str(out / "pairwise.md"))
