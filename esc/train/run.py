"""The training job behind `train.py`: compose pieces from the config, fit, export the adapter."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from lightning_fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict

from esc.models.loading import load_tokenizer
from esc.runinfo import NullManifest, RunManifest
from esc.train.adapter import save_adapter
from esc.train.loggers import build_loggers
from esc.train.strategies import build_strategy

log = logging.getLogger(__name__)

GPU_ONLY_STRATEGY = ("DeepSpeed", "FSDP", "DDP")


def adapt_to_hardware(cfg: DictConfig) -> list[str]:
    """On a machine without CUDA, swap GPU-only settings for CPU ones, when `cpu_fallback` allows.

    This is what lets `python train.py +exp=esc_role model=tiny` (a GPU recipe) run on a laptop.
    Each substitution is logged and recorded in the manifest; `cpu_fallback=false` turns them off.
    """
    if torch.cuda.is_available() or not cfg.get("cpu_fallback", True):
        return []
    changes = []
    target = str(cfg.strategy.get("_target_", ""))
    if any(name in target for name in GPU_ONLY_STRATEGY):
        changes.append(f"strategy {target.rsplit('.', 1)[-1]} -> auto (needs CUDA GPUs)")
        with open_dict(cfg):
            cfg.strategy = {"name": "auto"}
    precision = str(cfg.trainer.get("precision", "32-true"))
    if precision.startswith(("bf16", "16")):
        changes.append(f"trainer.precision {precision} -> 32-true (CPU)")
        cfg.trainer.precision = "32-true"
    if cfg.module.optimizer.get("_target_", "").startswith("deepspeed."):
        changes.append("optimizer DeepSpeed -> torch.optim.AdamW (no DeepSpeed engine on CPU)")
        cfg.module.optimizer._target_ = "torch.optim.AdamW"
    for change in changes:
        log.warning("No CUDA GPU: %s. Set cpu_fallback=false to make this an error.", change)
    return changes


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit a LoRA adapter as configured; return where the outputs are."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    fallbacks = adapt_to_hardware(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    # One writer: every rank of a multi-GPU job runs this function.
    manifest = RunManifest(out, resolved, seed=cfg.seed) if rank_zero_only.rank == 0 else NullManifest()
    manifest.update(hardware_fallbacks=fallbacks)
    pl.seed_everything(cfg.seed, workers=True)

    log.info("Instantiating tokenizer for model <%s>", cfg.model.name)
    tokenizer = load_tokenizer(cfg.model)
    log.info("Instantiating datamodule <%s>", cfg.datamodule._target_)
    datamodule = instantiate(cfg.datamodule, tokenizer=tokenizer, _convert_="all")
    log.info("Instantiating module <%s>", cfg.module._target_)
    module = instantiate(cfg.module, _convert_="all")

    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c and "_target_" in c]
    loggers = build_loggers(cfg.get("logger"), resolved)
    trainer_kwargs: dict[str, Any] = {
        "callbacks": callbacks,
        "logger": loggers or False,
        "strategy": build_strategy(cfg.strategy),
    }
    if cfg.module.get("quantization", {}).get("load_in_4bit") and cfg.trainer.get("num_sanity_val_steps"):
        # bitsandbytes repacks 4-bit weights for CPU inference on the first no-grad forward, which
        # breaks the next training step: no sanity validation before training in QLoRA mode.
        log.warning("QLoRA: skipping sanity validation before training (trainer.num_sanity_val_steps=0)")
        trainer_kwargs["num_sanity_val_steps"] = 0
    trainer: pl.Trainer = instantiate(cfg.trainer, **trainer_kwargs)

    ckpt_path = _resume_checkpoint(cfg, out)
    manifest.update(resumed_from=str(ckpt_path) if ckpt_path else None)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        trainer.save_checkpoint(out / "last.ckpt")
        save_adapter(trainer, module, out, tokenizer)
    except BaseException as err:
        manifest.finish(
            status="failed" if not isinstance(err, KeyboardInterrupt) else "interrupted",
            error=f"{type(err).__name__}: {err}"[:500],
        )
        raise
    finally:
        if any(type(logger).__name__ == "WandbLogger" for logger in loggers):
            import wandb

            wandb.finish()
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    manifest.finish(
        global_step=trainer.global_step,
        final_metrics=metrics,
        adapter_dir=str(out),
        metrics_csv=str(out / "metrics.csv"),
    )
    return {
        "output_dir": str(out),
        "adapter_dir": str(out),
        "global_step": trainer.global_step,
        "metrics": metrics,
    }


def _resume_checkpoint(cfg: DictConfig, out: Path) -> str | None:
    """`resume=auto` continues from the newest checkpoint in OUT, if any (a rerun after a kill).

    Candidates are `last.ckpt` (every N steps) and `hpc_ckpt_*.ckpt`, which Lightning writes when
    SLURM signals the end of a job's time; whichever was written last wins.
    """
    mode = cfg.get("resume", "auto")
    if mode in (False, "false", "never", None):
        return None
    if mode != "auto":
        return str(mode)  # an explicit checkpoint path
    candidates = [p for p in [out / "last.ckpt", *out.glob("hpc_ckpt_*.ckpt")] if p.exists()]
    if not candidates:
        return None
    newest = max(candidates, key=lambda p: p.stat().st_mtime)
    log.info("Resuming from %s", newest)
    return str(newest)
