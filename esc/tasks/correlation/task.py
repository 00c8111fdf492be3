"""`rank.py mode=correlation`: text metrics and judges against the human scores (paper Tables 3,
13-15). Reads the annotations, the judges' score files and the references, keeps the dialogues no
judge was trained on, and writes OUT/correlation.md, correlation.result.json and the tables' CSVs
(correlation.csv: every figure), all by `esc.reports.result.write_result`; the statistics and tables
are `esc.tasks.correlation.report`'s.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from esc.annotate.held_out import folder_judge, held_out, trained_dialogues
from esc.annotate.human_scores import default_esconv_path, read_annotations
from esc.config_rules import Section, Settings
from esc.errors import UserError
from esc.lifecycle import JobResult
from esc.reports.result import Heading, Text, write_result
from esc.reports.wandb_report import log_run
from esc.scoring.store import read_scores
from esc.settings.types import ExistingFile, NonEmpty
from esc.tasks.correlation.report import (
    analyse,
    column_name,
    common_dialogues,
    correlation_report,
    human_columns,
    judge_metrics,
    load_items,
    read_references,
    score_paths,
    summary,
    text_metrics,
)
from esc.tasks.correlation.textmetrics import METRICS as TEXT_METRICS
from esc.tasks.task import Context, Mode, Outcome, Plan, register

log = logging.getLogger(__name__)


@dataclasses.dataclass
class CorrelationResult(JobResult):
    """mode=correlation: text metrics and judges against the human scores."""

    markdown: str = ""

    def summary(self) -> str:
        return f"{self.markdown}\ncorrelation: {self.output_dir}/correlation.md (.csv, .result.json)"


class CorrelationSettings(Settings):
    """`correlation` (conf/rank.yaml): what is correlated with the human scores."""

    annotations: str | None  # null: data/annotations/esconv_ratings.jsonl
    scores: Any  # rank.py score files or folders (the judges' rows); null: none
    references: ExistingFile | None  # JSONL {dialogue_id, references}: BLEU, ROUGE-L, METEOR need it
    metrics: NonEmpty[Literal[tuple(TEXT_METRICS)]] | None = Field(description="null: all")  # type: ignore[valid-type]
    bootstrap: int = Field(ge=0, description="0: no intervals")


@register
class Correlation(Mode):
    """Text metrics and judges against the human scores (Tables 3, 13-15); judges nothing."""

    name = "correlation"
    judges = False
    reports = ("correlation",)
    config = (Section("correlation", CorrelationSettings),)

    def plan(self, ctx: Context) -> Plan:
        return Plan()

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        result = run_correlation(ctx.section("correlation"), ctx.seed, ctx.out)
        wandb_dir = log_run(ctx.out, ctx.section("wandb"), ctx.cfg)
        manifest = {
            "correlation": result["files"]["md"],
            "warnings": result["warnings"],
            "wandb_dir": wandb_dir,
        }
        return Outcome(CorrelationResult(str(ctx.out), result["markdown"]), manifest)


def _trained_on(paths: Sequence[Path]) -> set[str]:
    """The annotated dialogues any judge of these score files was trained on."""
    found: set[str] = set()
    for path in paths:
        found |= trained_dialogues(folder_judge(path))
    return found


def run_correlation(settings: CorrelationSettings, seed: int, out: Path) -> dict[str, Any]:
    """The analysis `settings` ask for; writes the report (OUT/correlation.md, .result.json, the CSVs)
    and returns its markdown, its files, the warnings and `summary` (every figure, for a caller)."""
    conf = {
        "annotations": Path(settings.annotations or default_esconv_path()),
        "scores": score_paths(settings.scores),
        "references": Path(settings.references) if settings.references else None,
        "metrics": list(TEXT_METRICS) if settings.metrics is None else list(settings.metrics),
        "bootstrap": settings.bootstrap,
        "seed": seed,
    }
    out = Path(out)
    log.info("Reading annotations from %s", conf["annotations"])
    annotations = read_annotations(conf["annotations"])
    records = [r for p in conf["scores"] for r in read_scores(p)]
    if conf["scores"] and not records:
        raise UserError(
            f"no score records in {', '.join(map(str, conf['scores']))} (config `correlation.scores`)"
        )
    annotations = held_out(annotations, _trained_on(conf["scores"]), "a judge of correlation.scores")
    items = load_items(annotations, records)
    known = {it.dialogue_id for it in items}
    warns: list[str] = []
    references = None
    if conf["references"] is not None:
        references = read_references(conf["references"])
        unknown = sorted(set(references) - known)
        if unknown:
            warns.append(
                f"references {conf['references']}: {len(unknown)} of {len(references)} dialogue ids match no "
                f"annotation (e.g. {', '.join(unknown[:3])}); left out"
            )
    judge_rows, judge_warns = judge_metrics(records, items)
    warns += judge_warns
    metrics = text_metrics(items, conf["metrics"], references) + judge_rows
    common = common_dialogues(items, metrics)
    if len(common) < len(items):
        warns.append(
            f"{len(items) - len(common)} of {len(items)} annotated dialogues lack a value of some row "
            f"(no reference, no valid judgment): every row is computed on the other {len(common)}"
        )
    for warning in warns:
        log.warning(warning)
    cells = analyse(items, metrics, conf["bootstrap"], conf["seed"])
    columns = human_columns(items)
    systems = sorted({str(it.system) for it in common if it.system is not None})
    inputs = len({it.input for it in common})
    header = [
        Heading("Correlation with human scores", level=1),
        Text(
            f"{len(common)} of {len(items)} annotated dialogues ({conf['annotations']}) from {inputs} "
            f"inputs and {len(systems) or 1} system(s){': ' + ', '.join(systems) if systems else ''}; "
            f"human-scored dimensions: {', '.join(column_name(c) for c in columns[:-1])}; "
            f"{conf['bootstrap']} bootstrap resamples."
        ),
        *(Text(f"Warning: {w}") for w in warns),
    ]
    report = correlation_report(cells, metrics, columns, header)
    result = {
        "annotations": str(conf["annotations"]),
        "scores": [str(p) for p in conf["scores"]],
        "references": None if conf["references"] is None else str(conf["references"]),
        "dialogues": len(items),
        "common_dialogues": len(common),
        "inputs": len({it.input for it in common}),
        "systems": systems,
        "dimensions": columns,
        "bootstrap": conf["bootstrap"],
        "seed": conf["seed"],
        "warnings": warns,
        **summary(cells, metrics),
    }
    out.mkdir(parents=True, exist_ok=True)
    markdown = write_result(out, report)
    files = {k: str(out / f"correlation.{k}") for k in ("md", "csv", "result.json")}
    return {"markdown": markdown, "files": files, "warnings": warns, "summary": result}
