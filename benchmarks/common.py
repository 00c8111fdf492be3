"""What the benchmark scripts share: a quiet CPU Trainer for timed training runs."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl


def cpu_trainer(
    max_steps: int, callbacks: list[pl.Callback], root: Path, gradient_clip_val: float
) -> pl.Trainer:
    """One CPU device, fp32, no logger, checkpoints, validation, progress bar or model summary."""
    return pl.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        precision="32-true",
        gradient_clip_val=gradient_clip_val,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        default_root_dir=str(root),
    )
