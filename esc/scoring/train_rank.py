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
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from esc.errors import ConfigError
from esc.runinfo import RunManifest
from esc.scoring import agreement as agree
from esc.scoring.annotations import Annotation, human_reference
from esc.scoring.judge import VALID, Judge, ScoreItem, build_judge
from esc.scoring.rank_data import splits
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord, ScoreStore
from esc.train.run import train

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


def judge_items(
    judge: Judge, annotations: Sequence[Annotation], store: ScoreStore, chunk: int = 32
) -> dict[tuple[str, str], int | None]:
    """Judge each test (dialogue, dimension) once (resumable via `store`); {key: score or None}."""
    seen: dict[tuple[str, str], ScoreItem] = {}
    for ann in annotations:
        seen.setdefault(
            (ann.dialogue_id, ann.dimension),
            ScoreItem(ann.dialogue_id, ann.dimension, ann.language, ann.lines),
        )
    pending = [item for key, item in seen.items() if not store.is_done(key)]
    prompt = {"style": judge.prompt, "version": judge.prompt_version}
    for start in range(0, len(pending), chunk):
        part = pending[start : start + chunk]
        store.add(
            ScoreRecord.make(
                j,
                dialogue_id=it.item_id,
                dimension=it.dimension,
                language=it.language,
                judge=judge.name,
                prompt=prompt,
            )
            for it, j in zip(part, judge.judge(part), strict=True)
        )
    return {key: (r.score if r.status == VALID else None) for key, r in store.records.items()}


def dialogue_length(ann: Annotation) -> int:
    return sum(len(text) for _, text in ann.lines)


def evaluate(cfg: DictConfig, out: Path, folders: Mapping[str, str], mode: str) -> list[agree.Agreement]:
    """Agreement with the human scores of the test split: trained judge, base model, baselines."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    parts = splits(data)
    test, train_part = parts["test"], parts["train"]
    if not test:
        raise ConfigError("data.split", "the test split is empty: nothing to measure the judge on")
    reference = human_reference(test)
    dims = sorted({k for _, k in reference}, key=DIMENSION_KEYS.index)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    rank_cfg = cfg.get("rank") or {}
    adapters = (
        {"layout": "per_dimension", "root": str(out), "dimensions": [d for d in dims if d in folders]}
        if mode == "per_dimension"
        else {"layout": "single", "root": folders["all"]}
    )
    judges = {
        f"ESC-RANK ({cfg.model.name})": {"adapters": adapters},
        f"{cfg.model.name} zero-shot": {"adapters": None},
    }
    results: list[agree.Agreement] = []
    n_resamples, seed = int(rank_cfg.get("bootstrap", 1000)), int(cfg.get("seed", 0))
    for label, extra in judges.items():
        judge = build_judge(
            {
                "kind": "local",
                "name": label,
                "model": model,
                "prompt": data.get("prompt", "official"),
                "batch_size": int(rank_cfg.get("eval_batch_size", 4)),
                **extra,
            }
        )
        try:
            store = ScoreStore(
                out / "test_scores" / f"{'base' if extra['adapters'] is None else 'rank'}.jsonl"
            )
            predicted = judge_items(judge, test, store)
        finally:
            judge.close()
        pairs = defaultdict(list)
        for key, human in reference.items():
            pairs[key[1]].append((predicted.get(key), human))
        results += agree.by_dimension(pairs, label, n_resamples, seed)
    results += _baselines(train_part, test, reference, dims, n_resamples, seed)
    return results


def _baselines(
    train_part: Sequence[Annotation],
    test: Sequence[Annotation],
    reference: Mapping,
    dims: Sequence[str],
    n_resamples: int,
    seed: int,
) -> list[agree.Agreement]:
    lengths = {a.dialogue_id: dialogue_length(a) for a in test}
    results = []
    for dim in dims:
        train_dim = [a for a in train_part if a.dimension == dim]
        keys = [k for k in reference if k[1] == dim]
        human = [reference[k] for k in keys]
        if not train_dim:
            continue
        majority = agree.majority_baseline([a.score for a in train_dim])
        results.append(
            agree.agreement("majority (train)", dim, [majority] * len(keys), human, n_resamples, seed)
        )
        fit = agree.length_baseline([dialogue_length(a) for a in train_dim], [a.score for a in train_dim])
        predicted = [fit(lengths[k[0]]) for k in keys]
        results.append(
            agree.agreement("dialogue length (train fit)", dim, predicted, human, n_resamples, seed)
        )
    return results


def train_esc_rank(cfg: DictConfig) -> dict[str, Any]:
    """The `+exp=esc_rank` job: train the adapters, then the agreement report on the test split."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
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
    report = agree.to_markdown(
        results + agree.mean_rows(results), title=f"ESC-RANK ({cfg.model.name}) on the held-out test split"
    )
    (out / "agreement.md").write_text(report, encoding="utf-8")
    agree.write_csv(results, out / "agreement.csv")
    (out / "agreement.json").write_text(json.dumps(agree.summary(results), indent=2) + "\n", encoding="utf-8")
    manifest.finish(
        status="completed",
        adapters_dir={k: v for k, v in folders.items()},
        agreement=str(out / "agreement.md"),
    )
    return {
        "output_dir": str(out),
        "adapter_dir": str(out),
        "report": report,
        "folders": folders,
        "dimensions_without_annotations": without,
        "global_step": None,
        "saved": f"Adapters saved to {out}/<dimension>: {', '.join(folders)}; "
        f"agreement: {out / 'agreement.md'}",
    }
