"""`train.py +exp=train/esc_rank`: fine-tune the ESC-RANK judge from human scores, then measure it.

As the paper: one LoRA adapter per dimension (``rank.adapters: per_dimension``), each trained by the
same job as ESC-Role (`esc.train.run.train`) into ``OUT/<dimension>/`` on that dimension's
annotations; ``rank.adapters: single`` trains one multi-task adapter on all of them into
``OUT/all/``. Dimensions without annotations get no adapter and are reported as such.

Each sample is the judge prompt answered with the human score; only the answer digit is learned,
and the scores' imbalance is countered by ``rank.balance`` (``sampling``: samples drawn in
proportion to their class weight, the default; ``loss``: each sample's loss weighted; ``none``),
the weights from ``data.balance_power`` (`esc.judge_training.data`). ``OUT/trained_on.json`` names
the annotated dialogues the adapters learned from (train and val), so no agreement is ever measured
on them (`esc.annotate.held_out.trained_dialogues`).

Then, on the held-out test split (20% of the dialogues): the trained judge (answer-token
distribution, `esc.scoring.judges.local`), the base model zero-shot with the same prompt
(``rank.compare_base``), and the trivial baselines (majority score, dialogue length), each against
the human scores, per dimension and per source, the argmax and the expected score, with paired
intervals of the trained judge's differences (`esc.tasks.agreement.report`), in
``OUT/agreement.{md,csv,json}``. A rerun resumes each dimension's training and skips finished ones.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf, open_dict
from pydantic import Field

from esc.annotate.held_out import write_trained_on
from esc.config_rules import OpenSettings, Section, Settings
from esc.judge_training.data import ADAPTER_MODES, BALANCE_MODES, splits
from esc.lifecycle import Job, JobResult, job_run
from esc.scoring.judge import PromptStyleName
from esc.scoring.judges import build_judge, judge_settings
from esc.scoring.judging import judge_items
from esc.scoring.rubrics import DIMENSION_KEYS, LANGUAGES
from esc.scoring.store import ScoreStore
from esc.settings.types import NonEmpty, ratios
from esc.tasks.agreement import report as agree
from esc.tasks.agreement.data import (
    agreement_items,
    annotated_items,
    baselines,
    predictions,
    sample_dialogues,
    split_annotations,
    write_agreement,
)
from esc.train.run import output_settings, train

log = logging.getLogger(__name__)
MODES = ADAPTER_MODES
BALANCE = BALANCE_MODES


@dataclasses.dataclass
class EscRankResult(JobResult):
    """The adapters (one folder per dimension, or one for all) and the agreement report."""

    folders: dict[str, str] = dataclasses.field(default_factory=dict)
    report: str = ""
    dimensions_without_annotations: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        saved = f"Adapters saved to {self.output_dir}/<dimension>: {', '.join(self.folders)}"
        if self.report:
            saved += f"; agreement: {Path(self.output_dir) / 'agreement.md'}"
        return f"{self.report}\n{saved}" if self.report else saved


def _finished(folder: Path) -> bool:
    manifest = folder / "manifest.json"
    if not (manifest.is_file() and (folder / "adapter_model.safetensors").is_file()):
        return False
    return json.loads(manifest.read_text()).get("status") == "completed"


def train_adapters(
    cfg: DictConfig, checked: Mapping[Any, Any], out: Path, dims: Sequence[str], rank: RankTraining
) -> dict[str, str]:
    """Train the adapters; returns {dimension or "all": adapter directory}."""
    mode, balance = rank.adapters, rank.balance
    jobs = [(d, [d]) for d in dims] if mode == "per_dimension" else [("all", list(dims))]
    folders = {}
    for name, job_dims in jobs:
        folder = out / name
        folders[name] = str(folder)
        if _finished(folder):
            log.info("ESC-RANK %s: already trained in %s", name, folder)
            continue
        sub = copy.deepcopy(cfg)
        with open_dict(sub):
            sub.output_dir = str(folder)
            sub.run_name = f"{cfg.run_name}-{name}"
            sub.data.dimensions = job_dims
            sub.datamodule.weighted_sampling = balance == "sampling"
            sub.module.weighted_loss = balance == "loss"
        log.info("ESC-RANK: training the %s adapter into %s", name, folder)
        train(sub, checked)
    return folders


def evaluate(
    cfg: DictConfig, out: Path, folders: Mapping[str, str], rank: RankTraining, job: Job
) -> list[agree.Table]:
    """Agreement with the human scores of the test split: the trained judge, the base model
    (``rank.compare_base``) and the baselines, every row on the same items."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    test, train_part = split_annotations(data, "test")
    test = sample_dialogues(test, rank.eval_dialogues, cfg.seed)  # the run's seed (conf/train.yaml)
    items = annotated_items(test)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    dims = sorted({it.dimension for it in items}, key=DIMENSION_KEYS.index)
    adapters = (
        {"layout": "per_dimension", "root": str(out), "dimensions": [d for d in dims if d in folders]}
        if rank.adapters == "per_dimension"
        else {"layout": "single", "root": folders["all"]}
    )
    judges = {"rank": (judge_label(cfg, rank), adapters)}
    if rank.compare_base:
        judges["base"] = (f"{cfg.model.name} zero-shot", None)
    rows: dict[str, Any] = {}
    for file_name, (label, judge_adapters) in judges.items():
        judge = build_judge(
            judge_settings(
                {
                    "kind": "local",
                    "name": label,
                    "model": model,
                    "prompt": data["prompt"],
                    "batch_size": rank.eval_batch_size,
                    "adapters": judge_adapters,
                    "min_answer_mass": rank.min_answer_mass
                    if judge_adapters
                    else 0.0,  # the base: every answer
                }
            )
        )
        try:
            store = ScoreStore(out / "test_scores" / f"{file_name}.jsonl")
            rows[label] = predictions(judge_items(judge, items, store))
            if file_name == "rank":  # where its test scores came from (`esc.annotate.held_out.folder_judge`)
                job.manifest.update(judge=judge.identity())
        finally:
            judge.close()
    rows.update(baselines(train_part, test))
    return agree.agreement_tables(agreement_items(test), rows, rank.bootstrap, cfg.seed)


def judge_label(cfg: DictConfig, rank: RankTraining) -> str:
    """The trained judge's row label: model and adapter layout."""
    return f"ESC-RANK ({cfg.model.name}, {rank.adapters})"


def train_esc_rank(cfg: DictConfig, checked: Mapping[Any, Any]) -> EscRankResult:
    """The `+exp=train/esc_rank` job: train the adapters, then the agreement report on the test
    split. `checked`: the sections `esc.config_schema.validate` returned (`rank` among them)."""
    out = Path(cfg.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    with job_run(out, "train.esc_rank", output_settings(cfg), resolved, seed=cfg.seed) as job:
        return _train_esc_rank(job, cfg, checked, out)


def _train_esc_rank(job: Job, cfg: DictConfig, checked: Mapping[Any, Any], out: Path) -> EscRankResult:
    rank: RankTraining = checked["rank"]
    data = OmegaConf.to_container(cfg.data, resolve=True)
    parts = splits(data)
    dims = [d for d in DIMENSION_KEYS if any(a.dimension == d for a in parts["train"])]
    without = [d for d in DIMENSION_KEYS if d not in dims]
    manifest = job.manifest
    manifest.update(
        adapters=rank.adapters,
        dimensions_trained=dims,
        dimensions_without_annotations=without,
        split={name: len(anns) for name, anns in parts.items()},
    )
    if without:
        log.warning("No training annotations for %s: no adapter, nothing measured", ", ".join(without))
    write_trained_on(out, data["annotations"], [*parts["train"], *parts["val"]])
    folders = train_adapters(cfg, checked, out, dims, rank)
    results = evaluate(cfg, out, folders, rank, job) if rank.evaluate else []
    title = f"{judge_label(cfg, rank)} against people on the held-out test split"
    report = write_agreement(out, results, title) if results else ""
    return job.complete(
        EscRankResult(str(out), folders, report, without),
        adapters_dir=dict(folders),
        agreement=str(out / "agreement.md") if results else None,
    )


class RankTraining(Settings):
    """`rank:` of `+exp=train/esc_rank` (conf/exp/train/esc_rank*.yaml): the adapters and their
    agreement report on the held-out split."""

    adapters: Literal[ADAPTER_MODES]  # type: ignore[valid-type]
    balance: Literal[BALANCE_MODES]  # type: ignore[valid-type]
    evaluate: bool
    compare_base: bool
    eval_dialogues: int | None = Field(ge=1, description="null: the whole test split")
    eval_batch_size: int = Field(ge=1)
    min_answer_mass: float = Field(ge=0, le=1)
    bootstrap: int = Field(ge=0)


class RankData(OpenSettings):
    """`data:` of `+exp=train/esc_rank` (conf/data/esc_rank.yaml): what the samples are built from."""

    prompt: PromptStyleName  # the judge prompt the samples are built with (official, paper)
    balance_power: float = Field(ge=0, description="0: no class weights; 1: every score equally")
    languages: NonEmpty[Literal[LANGUAGES]]  # type: ignore[valid-type]
    split: ratios("train", "val", "test")  # type: ignore[valid-type]
    seed: int


def _esc_rank(cfg: Any) -> bool:
    """Whether train.py runs ESC-RANK's experiment (its `rank:` node)."""
    return cfg.get("rank") is not None


#: what `train.py +exp=train/esc_rank` reads beside train.py's own config (`esc.config_schema`)
CONFIG: tuple[Section, ...] = (
    Section("data", RankData, when=_esc_rank),
    Section("rank", RankTraining, optional=True),
)
