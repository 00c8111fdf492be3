"""`rank.py mode=agreement`: a judge (or existing score files) against the human scores of one split,
beside the baselines."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from esc.annotate import held_out
from esc.config_rules import OpenSettings, Section, Settings
from esc.lifecycle import JobResult
from esc.reports import breakdown
from esc.reports.result import Block, Report, Text
from esc.reports.wandb_report import log_run
from esc.scoring.judging import Batch
from esc.scoring.rubrics import DIMENSION_KEYS, LANGUAGES, labelled_counts
from esc.scoring.store import ScoreRecord, ScoreStore, score_inputs
from esc.settings.types import NonEmpty, Paths, ratios
from esc.tasks.agreement import breakdown as agreement_breakdown
from esc.tasks.agreement import data as agreement_data
from esc.tasks.agreement import raters as rater_agreement
from esc.tasks.agreement import report as agree
from esc.tasks.agreement.data import SPLITS
from esc.tasks.task import Context, Mode, Outcome, Plan, in_mode, register

log = logging.getLogger(__name__)


@dataclasses.dataclass
class AgreementResult(JobResult):
    """mode=agreement: the judge's (or the score files') agreement with people, and the baselines."""

    markdown: str = ""
    invalid: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)  # judge -> dimension -> n

    def summary(self) -> str:
        lines = [
            f"invalid judgments of {judge} by dimension: {labelled_counts(dims)}"
            for judge, dims in self.invalid.items()
        ]
        return "\n".join(
            [self.markdown, *lines, f"agreement: {self.output_dir}/agreement.md (.csv, .result.json)"]
        )


class AgreementSettings(Settings):
    """`agreement` (conf/rank.yaml): which human scores, which split, what beside the judge."""

    annotations: str | None  # null: data/annotations/esconv_ratings.jsonl
    split: Literal[SPLITS]  # type: ignore[valid-type]
    split_ratios: ratios("train", "val", "test")  # type: ignore[valid-type]
    split_seed: int
    languages: NonEmpty[Literal[LANGUAGES]]  # type: ignore[valid-type]
    baselines: bool
    label: str | None
    bootstrap: int = Field(ge=0)


class ExistingScores(OpenSettings):
    """mode=agreement's `scores`: existing score files instead of judging (null: judge)."""

    scores: Paths | None


@register
class Agreement(Mode):
    """The judge (or the judges of existing `scores`) against the human annotations of one split,
    beside the baselines; a trained judge only on dialogues it did not learn from."""

    name = "agreement"
    reports = ("agreement",)
    stores = (("scores/annotations__*.jsonl", ScoreRecord),)  # the annotated dialogues, judged
    config = (
        Section("", ExistingScores, when=in_mode("agreement")),
        Section("agreement", AgreementSettings),
    )

    def needs_judge(self, cfg: Mapping[str, Any]) -> bool:
        return not cfg["scores"]  # existing score files instead of judging

    def settings(self, sections: Mapping[str, Any]) -> dict[str, Any]:
        # which annotated dialogues it judges (the baselines and labels are rebuilt with the report)
        keys_ = ("annotations", "languages", "split_ratios", "split_seed", "split")
        section = sections["agreement"]  # the keys in the order folders recorded them (ratios now floats)
        return {"annotations": {k: getattr(section, k) for k in keys_}}

    def plan(self, ctx: Context) -> Plan:
        section: AgreementSettings = ctx.section("agreement")
        data = {
            "annotations": section.annotations,
            "dimensions": ctx.run.dimensions,
            "languages": section.languages,
            "split": section.split_ratios,
            "seed": section.split_seed,
        }
        evaluated, train_part = agreement_data.split_annotations(data, section.split)
        if not ctx.judges:
            paths = score_inputs(ctx.run.scores)
            rows, judges = agreement_data.scores_from_files(paths)
            for path in paths:  # score files of a rank.py folder: its judge's identity is in the manifest
                identity = held_out.folder_judge(path)
                evaluated = held_out.held_out(
                    evaluated, held_out.trained_dialogues(identity), f"judge in {path}"
                )
            manifest = {"scores": [str(p) for p in paths]}
            return Plan([], manifest, (evaluated, train_part, rows, ", ".join(judges)))
        judge = ctx.judge
        evaluated = held_out.held_out(evaluated, held_out.trained_dialogues(judge.identity()), judge.name)
        store = ScoreStore(ctx.out / "scores" / f"annotations__{judge.name}.jsonl")
        items = agreement_data.annotated_items(evaluated)
        batch = Batch(judge, items, store, "annotated dialogues", "score")
        return Plan([batch], {}, (evaluated, train_part, {}, judge.name))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        evaluated, train_part, rows, label = plan.data
        section: AgreementSettings = ctx.section("agreement")
        out = ctx.out
        rows = dict(rows)
        for batch in plan.batches:
            rows[batch.judge.name] = agreement_data.predictions(dict(batch.store.records))
        n_resamples, seed = section.bootstrap, ctx.seed
        items = agreement_data.agreement_items(evaluated)
        for name, predicted in rows.items():
            agreement_data.coverage_warning(predicted, items, name)
        judges = dict(rows)  # the judges, before the baselines join them
        left_out: list[Block] = []
        if section.baselines and section.split == "all":  # fitted on the items they would be scored on
            left_out = [Text(agreement_data.IN_SAMPLE)]
            log.warning("%s", agreement_data.IN_SAMPLE)
        elif section.baselines:
            rows.update(agreement_data.baselines(train_part, evaluated))
        tables = agree.agreement_tables(items, rows, n_resamples, seed)
        label = section.label or label
        title = f"{label} against people: {len(items)} annotated items ({section.split} split)"
        sections: list[Block] = []  # by language and turns (docs/scoring.md, "Breakdowns"), after the tables
        board = ctx.section("leaderboard")
        if board.breakdowns:
            cuts = agreement_breakdown.agreement_breakdowns(
                items, rows, breakdown.annotation_facets(evaluated), board.min_n, n_resamples, seed, tables
            )
            sections = agreement_breakdown.agreement_breakdown_blocks(cuts)
        raters = sorted({a.annotator for a in evaluated})
        people: list[
            Block
        ] = []  # several raters: their agreement (the ceiling) beside each judge's with each
        if len(raters) > 1:
            found_raters, people_rows = rater_agreement.rater_rows(evaluated, judges, n_resamples, seed)
            people = rater_agreement.people_blocks(found_raters, people_rows, list(judges))
        markdown = agreement_data.write_agreement(out, tables, title, extra=[*left_out, *people, *sections])
        if people:
            markdown += "\n" + Report("agreement", tuple(people)).to_markdown()
        invalid = {  # each judge's (not the baselines'), named
            judge: {
                t.scope: r.n_invalid
                for t in tables
                if t.source == agree.ALL_SOURCES and t.scope in DIMENSION_KEYS
                for r in t.rows
                if r.reading == "argmax" and r.judge == judge
            }
            for judge in judges
        }
        wandb_dir = log_run(out, ctx.section("wandb"), ctx.cfg)
        manifest = {"agreement": str(out / "agreement.md"), "invalid": invalid, "wandb_dir": wandb_dir}
        return Outcome(AgreementResult(str(out), markdown, invalid), manifest)
