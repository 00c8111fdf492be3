"""`rank.py mode=pairwise`: one judge prefers one of two chatbots, card by card, in both orders.

The dialogue files of `dialogues` (two or more evaluate.py runs, or files) are matched by role-player
and card; every pair of targets that played a card gets one item per dimension and order
(`esc.tasks.pairwise.questions`), judged by any judge (answer distribution over A/B/C for local models,
constrained or strictly parsed for APIs) and appended to `OUT/pairwise/<judge>.jsonl` as it goes; a
rerun judges only what is missing, failed or changed. Then the report (`esc.tasks.pairwise.report`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from esc.config_rules import Section, Settings
from esc.dialogues.record import dialogue_lines
from esc.dialogues.store import dialogue_file, read_dialogues
from esc.errors import UserError
from esc.reports.runlog import Judgment
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.judging import Batch, selected_dimensions
from esc.scoring.store import ScoreRecord, ScoreStore
from esc.tasks.answered import AnsweredResult
from esc.tasks.pairwise.questions import (
    ORDERS,
    TIE,
    PairwiseRecord,
    pair_items,
    pairs,
    pairwise_digest,
    pairwise_prompts,
    verdict,
    winner,
)
from esc.tasks.pairwise.report import Judged, dropped_cards, write_report
from esc.tasks.run_log import logged
from esc.tasks.task import Context, Mode, Outcome, Plan, register


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


class PairwiseSettings(Settings):
    """`pairwise` (conf/rank.yaml): the Bradley-Terry fit's resamples and prior."""

    bootstrap: int = Field(ge=0)  # resamples by card for the 95% intervals
    prior: float = Field(gt=0, multiple_of=0.5, description="pseudo-wins each way per pair")


@register
class Pairwise(Mode):
    name = "pairwise"
    reads_dialogues = True
    own_questions = True
    reports = ("pairwise",)
    config = (Section("pairwise", PairwiseSettings),)
    stores = (("pairwise/*.jsonl", PairwiseRecord),)

    def judgment(self, record: ScoreRecord) -> Judgment:
        """One answer about a pair in one order (item id `<role-player>/<lang>/<card>/<x>|<y>/<order>`):
        both dialogues, the one shown as A first, by the ids mode=score gives them (evaluate.py's file
        names: the record names no file); the answer "A", "B" or "tie"; the order, the target shown
        first and the one the answer prefers in `detail`."""
        roleplayer, language, card, targets, order = _pair_id(record.dialogue_id)
        x, _, y = targets.partition("|")
        if order not in ORDERS or not y or not card.isdigit():
            raise ValueError("not a pair's id (<role-player>/<lang>/<card>/<x>|<y>/<order>)")
        shown = (x, y) if order == "xy" else (y, x)
        dialogues = tuple(f"{dialogue_file(Path(), t, roleplayer, language).stem}/{card}" for t in shown)
        detail = {"order": order, "first": shown[0]}
        answer = None
        if record.score is not None:
            answer = TIE if record.score == 2 else pairwise_prompts()["answers"][record.score]
            detail["preferred"] = winner(order, record.score, x, y)
        return logged(
            self.name, record, dialogues, answer,
            roleplayer=roleplayer, language=language, card_id=int(card), detail=tuple(detail.items()),
        )  # fmt: skip

    def settings(self, sections: Mapping[str, Any]) -> dict[str, Any]:
        return {"pairwise": {"questions_sha256": pairwise_digest()}}

    def plan(self, ctx: Context) -> Plan:
        files = ctx.dialogue_files(distinct_names=True)
        dims = selected_dimensions(ctx.run.dimensions)
        dialogues = []
        for path in files:
            for lineno, dialogue in enumerate(read_dialogues(path), 1):
                if dialogue.status == "complete":
                    dialogue_lines(
                        dialogue, path, lineno
                    )  # the checks score and safety make: turns alternate
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
        store = ScoreStore(ctx.out / "pairwise" / f"{ctx.judge.name}.jsonl", PairwiseRecord)
        batch = Batch(ctx.judge, items, store, "pairs of dialogues, both orders", "verdict")
        manifest = {"sources": [str(p) for p in files], "pairs": len(found)}
        return Plan([batch], manifest, (found, dims, played))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        found, dims, played = plan.data
        records = plan.batches[0].store.records
        counts: Counter = Counter(skipped=ctx.counts["skipped"])
        judged = []
        for pair in found:
            for key in dims:
                answers = {o: records.get((f"{pair.pair_id}/{o}", key)) for o in ORDERS}
                for record in answers.values():
                    counts[record.status if record is not None else FAILED] += 1
                judged.append(Judged(pair, key, verdict(pair, answers)))
        section: PairwiseSettings = ctx.section("pairwise")
        name, n = ctx.judge.name, section.bootstrap
        report = write_report(ctx.out, judged, dims, name, n, ctx.seed, dropped_cards(played), section.prior)
        result = PairwiseResult(str(ctx.out), report["markdown"], dict(counts), len(judged))
        return Outcome(result, {"counts": dict(counts), "report": str(ctx.out / "pairwise.md")})


def _pair_id(item_id: str) -> tuple[str, ...]:
    """(role-player, language, card, "x|y", order) of a pair's item id; a role-player's name may hold
    "/"."""
    parts = item_id.rsplit("/", 4)
    if len(parts) != 5:
        raise ValueError("not a pair's id (<role-player>/<lang>/<card>/<x>|<y>/<order>)")
    return tuple(parts)
