"""`rank.py mode=agreement`: a judge (or existing score files) against the human scores of one split,
beside the baselines."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from esc.config_rules import Rule, Section, either, integer, keys, list_of, number, one_of, paths
from esc.jobs.mode import Context, Mode, Outcome, Plan, in_mode, register
from esc.jobs.score import score_inputs
from esc.lifecycle import JobResult
from esc.reports import breakdown, judge_agreement_data
from esc.reports import judge_agreement as agree
from esc.reports.judge_agreement_data import SPLITS
from esc.reports.wandb_report import log_run
from esc.scoring.judging import Batch
from esc.scoring.rubrics import DIMENSION_KEYS, LANGUAGES
from esc.scoring.store import ScoreStore


@dataclasses.dataclass
class AgreementResult(JobResult):
    """mode=agreement: the judge's (or the score files') agreement with people, and the baselines."""

    markdown: str = ""
    invalid: dict[str, int] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        invalid = {k: v for k, v in self.invalid.items() if v}
        return (
            f"{self.markdown}\ninvalid judgments by dimension: {invalid or 'none'}\n"
            f"agreement: {self.output_dir}/agreement.md (.csv, .json)"
        )


@register
class Agreement(Mode):
    """The judge (or the judges of existing `scores`) against the human annotations of one split,
    beside the baselines; a trained judge only on dialogues it did not learn from."""

    name = "agreement"
    reports = ("agreement",)
    config = (
        Section("", (Rule("scores", either(one_of(None), paths()), when=in_mode("agreement")),)),
        Section(
            "agreement",
            (
                Rule("split", one_of(*SPLITS)),
                Rule("split_ratios", list_of(number(minimum=0), length=3), "train : val : test"),
                Rule("languages", list_of(one_of(*LANGUAGES))),
                Rule("bootstrap", integer(0)),
            ),
            keys(
                "annotations",
                "baselines",
                "bootstrap",
                "label",
                "languages",
                "split",
                "split_ratios",
                "split_seed",
            ),
        ),
    )

    def needs_judge(self, cfg: Mapping[str, Any]) -> bool:
        return not cfg.get("scores")  # existing score files instead of judging

    def settings(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        section = cfg.get("agreement") or {}
        keys_ = ("annotations", "languages", "split_ratios", "split_seed", "split")
        return {"annotations": {k: section.get(k) for k in keys_}}

    def plan(self, ctx: Context) -> Plan:
        section = ctx.section("agreement")
        data = {
            "annotations": section.get("annotations"),
            "dimensions": ctx.cfg.get("dimensions", "all"),
            "languages": section.get("languages") or ["en", "zh"],
            "split": section.get("split_ratios") or [7, 1, 2],
            "seed": section.get("split_seed", 42),
        }
        evaluated, train_part = judge_agreement_data.split_annotations(data, section.get("split", "test"))
        if not ctx.judges:
            paths = score_inputs(ctx.cfg)
            rows, judges = judge_agreement_data.scores_from_files(paths)
            for path in paths:  # score files of a rank.py folder: its judge's identity is in the manifest
                identity = judge_agreement_data.folder_judge(path)
                evaluated = judge_agreement_data.held_out(
                    evaluated, judge_agreement_data.trained_dialogues(identity), f"judge in {path}"
                )
            manifest = {"scores": [str(p) for p in paths]}
            return Plan([], manifest, (evaluated, train_part, rows, ", ".join(judges)))
        judge = ctx.judge
        evaluated = judge_agreement_data.held_out(
            evaluated, judge_agreement_data.trained_dialogues(judge.identity()), judge.name
        )
        store = ScoreStore(ctx.out / "scores" / f"annotations__{judge.name}.jsonl")
        items = judge_agreement_data.annotated_items(evaluated)
        batch = Batch(judge, items, store, "annotated dialogues", "score")
        return Plan([batch], {}, (evaluated, train_part, {}, judge.name))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        evaluated, train_part, rows, label = plan.data
        section, out = ctx.section("agreement"), ctx.out
        rows = dict(rows)
        for batch in plan.batches:
            rows[batch.judge.name] = judge_agreement_data.predictions(dict(batch.store.records))
        n_resamples, seed = int(section.get("bootstrap", 1000)), ctx.seed
        items = judge_agreement_data.agreement_items(evaluated)
        for name, predicted in rows.items():
            judge_agreement_data.coverage_warning(predicted, items, name)
        if section.get("baselines", True):
            rows.update(judge_agreement_data.baselines(train_part, evaluated))
        tables = agree.agreement_tables(items, rows, n_resamples, seed)
        split = section.get("split", "test")
        title = f"{label} against people: {len(items)} annotated items ({split} split)"
        sections = ""  # by language and turns (docs/scoring.md, "Breakdowns"), after the tables
        board = ctx.section("leaderboard")
        if board.get("breakdowns", True):
            cuts = breakdown.agreement_breakdowns(
                items, rows, breakdown.annotation_facets(evaluated), int(board.get("min_n", breakdown.MIN_N)),
                n_resamples, seed, tables,
            )  # fmt: skip
            sections = breakdown.agreement_markdown(cuts)
        markdown = judge_agreement_data.write_agreement(out, tables, title, extra=sections)
        invalid = {
            t.scope: r.n_invalid
            for t in tables
            if t.source == agree.ALL_SOURCES and t.scope in DIMENSION_KEYS
            for r in t.rows
            if r.reading == "argmax" and r.judge == next(iter(rows))
        }
        wandb_dir = log_run(out, ctx.cfg)
        manifest = {"agreement": str(out / "agreement.md"), "invalid": invalid, "wandb_dir": wandb_dir}
        return Outcome(AgreementResult(str(out), markdown, invalid), manifest)
