"""Per-batch wall time and token rate of a training run, logged beside its loss (metrics.csv).

Add it to any run with
`+callbacks.throughput._target_=esc.train.throughput.StepThroughput` (benchmarks/gpu_check.sh does).
Logged per training batch (with `accumulate_grad_batches` > 1, several batches make one optimizer
step). A batch's time runs from the end of the previous training batch to the end of this one (fetching and
collating the batch included); on a GPU the device is synchronised first, so queued kernels count
in the step that launched them. The first batch after the start or after a validation counts from
its own start instead (its fetch is not timed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch


def batch_tokens(batch: Mapping[str, Any]) -> int:
    """Real (non-padding) tokens in a training batch: its attention mask's sum, else every position."""
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        return int(mask.sum())
    return int(batch["input_ids"].numel())


class StepThroughput(pl.Callback):
    """Logs `train/step_seconds` and `train/tokens_per_s` (real tokens of the batch over that time)."""

    def __init__(self) -> None:
        self._last: float | None = None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int
    ) -> None:
        if self._last is None:
            self._last = self._now(pl_module)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        now = self._now(pl_module)
        seconds, self._last = now - (self._last or now), now
        if seconds > 0:
            pl_module.log("train/step_seconds", seconds, on_step=True, on_epoch=False)
            pl_module.log("train/tokens_per_s", batch_tokens(batch) / seconds, on_step=True, on_epoch=False)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last = None  # validation time is no training step's

    @staticmethod
    def _now(pl_module: pl.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()
