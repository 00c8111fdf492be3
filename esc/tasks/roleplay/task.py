"""`rank.py mode=roleplay` (`+exp=rank/roleplay_eval`): how well role-players play a person with a worry.

Inputs: the dialogues of one or more role-players (evaluate.py output folders: ESC-Role and the
GPT-4 / Baichuan-NPC baselines, `+exp=evaluate/roleplay_dialogues`), the role cards they played
(`roleplay.cards`; null: the released cards), and optionally the human dialogues those cards were
made from (`roleplay.human`: the `human_dialogues.jsonl` that `python build_cards.py` writes
for multi-turn sources). The judge answers the six metric questions for every dialogue and, for
every card with a human dialogue, the pairwise question in both orders (`esc.tasks.roleplay.questions`).

Outputs in OUT: `scores/roleplay__<judge>.jsonl` (every judgment, resumable: a rerun asks only
what is missing or failed), `table1.md|result.json|csv` and `winrates.md|result.json|csv`
(`esc.tasks.roleplay.report`, written by `esc.reports.result.write_result`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from esc.cards import load_cards
from esc.config_rules import Section, Settings
from esc.dialogues.store import read_dialogues
from esc.errors import DataError, UserError
from esc.hashing import sha256_file
from esc.jsonl import read_jsonl
from esc.reports.result import write_result
from esc.reports.runlog import Judgment
from esc.scoring.judging import Batch
from esc.scoring.roleplay_metrics import ROLEPLAY_METRICS_FILE
from esc.scoring.store import STATUSES, ScoreRecord, ScoreStore
from esc.settings.types import ExistingFile
from esc.tasks.answered import AnsweredResult
from esc.tasks.roleplay.questions import (
    METRIC_CHOICES,
    PAIR_CHOICES,
    PAIRWISE,
    RoleplayRecord,
    human_lines,
    metric_items,
    pairwise_items,
    seeker_turns,
)
from esc.tasks.roleplay.questions import ORDERS as PAIR_ORDERS
from esc.tasks.roleplay.report import table1, table1_report, win_rates, winrate_report
from esc.tasks.run_log import logged
from esc.tasks.task import Context, Mode, Outcome, Plan, register

log = logging.getLogger(__name__)


def _cards(paths: Any) -> dict[tuple[int, str], str]:

    cards = load_cards([Path(p) for p in paths] if paths else None)
    return {(c.id, c.language): c.to_text() for c in cards}


def _human(path: Any) -> dict[tuple[int, str], list[tuple[str, str]]]:
    if not path:
        return {}
    path = Path(path)  # an existing file (`roleplay.human`, checked by its settings)
    out = {}
    for lineno, record in read_jsonl(path):
        try:
            out[(int(record["card_id"]), str(record["language"]))] = human_lines(record)
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"{path} [line {lineno}]: not a human dialogue record ({err})") from None
    return out


@dataclasses.dataclass
class RoleplayResult(AnsweredResult):
    """Table 1 (the six role-play metrics) and Figure 3 (win rates against the human dialogues)."""

    table1: Any = None
    winrates: Any = None

    def summary(self) -> str:
        return f"{self.markdown}\njudgments: {self.counts}; {self.output_dir}/table1.md, winrates.md (.csv)"


class RoleplaySettings(Settings):
    """`roleplay` (+exp=rank/roleplay_eval): the cards and human dialogues the items ask about."""

    cards: Any  # card files the dialogues played; null: the released high-quality cards
    human: ExistingFile | None  # JSONL of the cards' source human dialogues; null: no pairwise test
    turns: int = Field(ge=1)  # seeker messages of the human dialogue shown
    metrics: bool  # the six metrics of Table 10
    pairwise: bool  # the human-likeness test of Figure 3, both orders
    bootstrap: int = Field(ge=0)  # resamples for the 95% intervals


@register
class Roleplay(Mode):
    """Judge the role-players' dialogues (`dialogues`) on the six metrics and against the human
    dialogues of their cards."""

    name = "roleplay"
    reads_dialogues = True
    own_questions = True
    reports = ("table1", "winrates")
    config = (Section("roleplay", RoleplaySettings, missing="+exp=rank/roleplay_eval adds it"),)
    stores = (("scores/roleplay__*.jsonl", RoleplayRecord),)

    def judgment(self, record: ScoreRecord) -> Judgment:
        """A metric's rating ("0"-"2") of a role-play dialogue (item id `<role-player>:<lang>:<card>`),
        or the human-likeness answer ("A", "B") about it and its card's human dialogue, in the order
        `:rp_first` / `:human_first` names (`detail`: the order, which was shown first)."""
        dialogue_id, detail = record.dialogue_id, ()
        choices = METRIC_CHOICES
        if record.dimension == PAIRWISE:
            dialogue_id, _, order = dialogue_id.rpartition(":")
            if order not in PAIR_ORDERS:
                raise ValueError(f"a pairwise answer's id must end in one of {PAIR_ORDERS}")
            detail = (("order", order), ("first", "role-player" if order == "rp_first" else "human"))
            choices = PAIR_CHOICES
        roleplayer, language, card = dialogue_id.rsplit(":", 2)
        answer = None if record.score is None else choices[record.score]
        return logged(
            self.name, record, (dialogue_id,), answer,
            roleplayer=roleplayer, language=language, card_id=int(card), detail=detail,
        )  # fmt: skip

    def settings(self, sections: Mapping[str, Any]) -> dict[str, Any]:
        # what its items ask: the cards, the human dialogues, the questions' texts
        section = sections["roleplay"]
        settings = {k: getattr(section, k) for k in ("cards", "human", "turns", "metrics", "pairwise")}
        return {"roleplay": {**settings, "questions_sha256": sha256_file(ROLEPLAY_METRICS_FILE)}}

    def plan(self, ctx: Context) -> Plan:
        files = ctx.dialogue_files()
        section: RoleplaySettings = ctx.section("roleplay")
        cards, human, turns = _cards(section.cards), _human(section.human), section.turns
        items, pairs = [], 0
        for path in files:
            for d in read_dialogues(path):
                if d.status != "complete":
                    continue
                card = cards.get((d.card_id, d.language))
                if card is None:
                    raise DataError(
                        path,
                        f"card {d.card_id} ({d.language})",
                        "is in none of the card files of roleplay.cards",
                    )
                lines = [("user" if t.speaker == "roleplayer" else "assistant", t.text) for t in d.turns]
                dialogue_id = f"{d.roleplayer}:{d.language}:{d.card_id}"
                if section.metrics:
                    items += metric_items(dialogue_id, d.language, card, lines)
                if section.pairwise and (d.card_id, d.language) in human:
                    items += pairwise_items(
                        dialogue_id, d.language, lines, seeker_turns(human[(d.card_id, d.language)], turns)
                    )
                    pairs += 1
        if not items:
            raise UserError("no complete role-play dialogue to judge in the dialogue files given")
        if section.pairwise and human and not pairs:
            log.warning("roleplay.human matches none of the dialogues' cards: no pairwise test")
        store = ScoreStore(ctx.out / "scores" / f"roleplay__{ctx.judge.name}.jsonl", RoleplayRecord)
        batch = Batch(ctx.judge, items, store, "role-play replies", "rating")
        return Plan([batch], {"sources": [str(p) for p in files], "pairs": pairs})

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        batch, out = plan.batches[0], ctx.out
        records = [batch.store.records[(it.item_id, it.dimension)] for it in batch.items]
        n = ctx.section("roleplay").bootstrap
        t1, wins = table1(records, n, ctx.seed), win_rates(records, n, ctx.seed)
        table1_md = write_result(out, table1_report(t1))
        winrates_md = write_result(out, winrate_report(wins))
        markdown = f"## Role-play metrics (0-10, Table 1)\n\n{table1_md}"
        if wins:
            markdown += f"\n## Against the human dialogue (Figure 3)\n\n{winrates_md}"
        counts = {s: sum(r.status == s for r in records) for s in STATUSES}
        result = RoleplayResult(str(out), markdown, counts, t1, wins)
        manifest = {"counts": counts, "table1": str(out / "table1.md"), "winrates": str(out / "winrates.md")}
        return Outcome(result, manifest)
