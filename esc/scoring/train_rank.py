"""`train.py +exp=esc_rank`: fine-tune the ESC-RANK judge from human scores, then measure it.

As the paper: one LoRA adapter per dimension (``rank.adapters: per_dimension``), each trained by the
same job as ESC-Role (`esc.train.run.train`) into ``OUT/<dimension>/`` on that dimension's
annotations; ``rank.adapters: single`` trains one multi-task adapter on all of them into
``OUT/all/``. Dimensions without annotations get no adapter and are reported as such.

Then, on the held-out test split (20% of the dialogues): the trained judge (answer-token
distribution, `esc.scoring.judges.local`), the base model zero-shot with the same prompt, and the
trivial baselines (majority score, dialogue length), each against the human scores: ACC, ACC_soft,
QWK, MAE, correlations with bootstrap intervals (`esc.scoring.agreement`) in
``OUT/agreement.{md,csv,json}``. A rerun resumes each dimension's training and skips finished ones.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from esc.errors import ConfigError
from esc.rundir import RunFolder, refuse_unswept_sweep
from esc.runinfo import RunManifest
from esc.scoring import agreement as agree
from esc.scoring.agreement_run import (
    annotated_items,
    baselines,
    judge_agreement,
    judge_items,
    sample_dialogues,
    split_annotations,
    write_agreement,
)
from esc.scoring.annotations import human_reference
from esc.scoring.judge import build_judge
from esc.scoring.rank_data import splits
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreStore
from esc.train.run import output_settings, train

log = logging.getLogger(__name__)
MODES = ("per_dimension", "single")


def _finished(folder: Path) -> bool:
    manifest = folder / "manifest.json"
    if not (manifest.is_file() and (folder / "adapter_model.safetensors").is_file()):
        return False
    return json.loads(manifest.read_text()).get("status") == "completed"


def train_adapters(cfg: DictConfig, out: Path, dims: Sequence[str], mode: str) -> dict[str, str]:
    """Train the adapters; returns {dimension or "all": adapter directory}."""
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
        log.info("ESC-RANK: training the %s adapter into %s", name, folder)
        train(sub)
    return folders


def evaluate(cfg: DictConfig, out: Path, folders: Mapping[str, str], mode: str) -> list[agree.Agreement]:
    """Agreement with the human scores of the test split: trained judge, base model, baselines."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    test, train_part = split_annotations(data, "test")
    rank_cfg = cfg.get("rank") or {}
    test = sample_dialogues(test, rank_cfg.get("eval_dialogues"), int(cfg.get("seed", 42)))
    reference = human_reference(test)
    items = annotated_items(test)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    dims = [d for d in DIMENSION_KEYS if any(k[1] == d for k in reference)]
    adapters = (
        {"layout": "per_dimension", "root": str(out), "dimensions": [d for d in dims if d in folders]}
        if mode == "per_dimension"
        else {"layout": "single", "root": folders["all"]}
    )
    judges = {
        "rank": (f"ESC-RANK ({cfg.model.name})", adapters),
        "base": (f"{cfg.model.name} zero-shot", None),
    }
    results: list[agree.Agreement] = []
    n_resamples, seed = int(rank_cfg.get("bootstrap", 1000)), int(cfg.get("seed", 0))
    for file_name, (label, judge_adapters) in judges.items():
        judge = build_judge(
            {
                "kind": "local",
                "name": label,
                "model": model,
                "prompt": data.get("prompt", "official"),
                "batch_size": int(rank_cfg.get("eval_batch_size", 4)),
                "adapters": judge_adapters,
            }
        )
        try:
            predicted = judge_items(judge, items, ScoreStore(out / "test_scores" / f"{file_name}.jsonl"))
        finally:
            judge.close()
        results += judge_agreement(label, predicted, reference, n_resamples, seed)
    return results + baselines(train_part, test, reference, n_resamples, seed)


def train_esc_rank(cfg: DictConfig) -> dict[str, Any]:
    """The `+exp=esc_rank` job: train the adapters, then the agreement report on the test split."""
    refuse_unswept_sweep()
    out = Path(cfg.output_dir)
    with RunFolder(out, "train.esc_rank", output_settings(cfg)):
        return _train_esc_rank(cfg, out)


def _train_esc_rank(cfg: DictConfig, out: Path) -> dict[str, Any]:
    rank_cfg = cfg.get("rank") or {}
    mode = rank_cfg.get("adapters", "per_dimension")
    if mode not in MODES:
        raise ConfigError("rank.adapters", f"{mode!r} is not one of {MODES}")
    data = OmegaConf.to_container(cfg.data, resolve=True)
    parts = splits(data)
    dims = [d for d in DIMENSION_KEYS if any(a.dimension == d for a in parts["train"])]
    without = [d for d in DIMENSION_KEYS if d not in dims]
    manifest = RunManifest(out, OmegaConf.to_container(cfg, resolve=True), seed=cfg.get("seed"))
    manifest.update(
        adapters=mode,
        dimensions_trained=dims,
        dimensions_without_annotations=without,
        split={name: len(anns) for name, anns in parts.items()},
    )
    if without:
        log.warning("No training annotations for %s: no adapter, nothing measured", ", ".join(without))
    try:
        folders = train_adapters(cfg, out, dims, mode)
        results = evaluate(cfg, out, folders, mode) if rank_cfg.get("evaluate", True) else []
    except BaseException as err:
        manifest.finish(status="failed", error=f"{type(err).__name__}: {err}"[:500])
        raise
    title = f"ESC-RANK ({cfg.model.name}) on the held-out test split"
    report = write_agreement(out, results, title) if results else ""
    manifest.finish(
        status="completed",
        adapters_dir={k: v for k, v in folders.items()},
        agreement=str(out / "agreement.md") if results else None,
    )
    return {
        "output_dir": str(out),
        "adapter_dir": str(out),
        "report": report,
        "folders": folders,
        "dimensions_without_annotations": without,
        "global_step": None,
        "saved": f"Adapters saved to {out}/<dimension>: {', '.join(folders)}"
        + (f"; agreement: {out / 'agreement.md'}" if results else ""),
    }
