"""The training progress bar: it counts to where training will actually stop.

Lightning's bars show the whole epoch's batches unless `max_epochs == -1`; with `max_steps` set
(`trainer.max_steps=16` on a 800-batch epoch) they showed 800 and a time for all of them. Here the
total of an epoch is the batches it will really train: up to `max_steps` optimizer steps, each
`accumulate_grad_batches` batches, counted from the batch the epoch starts (or resumes) at.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar
from pytorch_lightning.callbacks.progress.progress_bar import ProgressBar
from pytorch_lightning.utilities.imports import _RICH_AVAILABLE

from esc.progress import duration

log = logging.getLogger("esc.progress")


def batches_to_train(trainer: pl.Trainer) -> int | float:
    """Batches the current epoch will train: its length, or fewer when `max_steps` ends training first.

    Counted like the bar counts (`batch_idx + 1`), so a resumed epoch's batches before the
    checkpoint are included.
    """
    epoch_batches = trainer.num_training_batches
    max_steps = trainer.max_steps
    if max_steps is None or max_steps < 0 or math.isinf(epoch_batches):
        return epoch_batches
    loop = trainer.fit_loop.epoch_loop
    # at an epoch's start the counters still hold the previous epoch, unless this epoch is resumed
    done_in_epoch = loop.batch_progress.current.ready if loop.restarting else 0
    remaining_steps = max(max_steps - trainer.global_step, 0)
    return min(epoch_batches, done_in_epoch + remaining_steps * max(trainer.accumulate_grad_batches, 1))


class StepsTQDMProgressBar(TQDMProgressBar):
    """`TQDMProgressBar` whose training total is `batches_to_train`."""

    @property
    def total_train_batches(self) -> int | float:
        return batches_to_train(self.trainer)


class StepsRichProgressBar(RichProgressBar):
    """`RichProgressBar` whose training total is `batches_to_train`."""

    @property
    def total_train_batches(self) -> int | float:
        return batches_to_train(self.trainer)


class PlainLinesProgress(ProgressBar):
    """Training progress as plain log lines, for output that is a file or a pipe (a SLURM log),
    where a bar redrawn in place shows nothing for minutes: the first step, then at most every
    `every_s` seconds, and the last: step, loss, seconds per step, time left."""

    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._enabled = True
        self._start = self._last = 0.0
        self._first_step = 0
        self._said_step = -1  # the step of the last line (the end does not say it twice)

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = self._last = time.monotonic()
        self._first_step = trainer.global_step
        if self._enabled and trainer.is_global_zero:
            log.info("train: %s", self._planned(trainer))

    def _planned(self, trainer: pl.Trainer) -> str:
        steps = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        start = f" from step {trainer.global_step}" if trainer.global_step else ""
        return f"{steps} optimizer steps{start}" if steps else "training"

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if not self._enabled or not trainer.is_global_zero:
            return
        done = trainer.global_step - self._first_step
        first = done == 1 and self._last == self._start
        if first or time.monotonic() - self._last >= self.every_s:
            self._line(trainer, done)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._enabled and trainer.is_global_zero and trainer.global_step != self._said_step:
            self._line(trainer, trainer.global_step - self._first_step)

    def _line(self, trainer: pl.Trainer, done: int) -> None:
        self._last = time.monotonic()
        self._said_step = trainer.global_step
        elapsed = self._last - self._start
        steps = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        parts = [f"train: step {trainer.global_step}" + (f"/{steps}" if steps else "")]
        loss = trainer.callback_metrics.get("train/loss") or trainer.callback_metrics.get("train_loss")
        if loss is not None:
            parts.append(f"loss {float(loss):.4f}")
        if done > 0:
            per_step = elapsed / done
            parts.append(f"{per_step:.1f} s/step")
            if steps and trainer.global_step < steps:
                parts.append(f"about {duration(per_step * (steps - trainer.global_step))} left")
        parts.append(f"{duration(elapsed)} so far")
        log.info("%s", ", ".join(parts))


def build_progress_bar(tty: bool | None = None, **kwargs: Any) -> pl.Callback:
    """On a terminal, the bar Lightning would pick (rich when installed, else tqdm), counting to
    `max_steps`; otherwise plain lines (`PlainLinesProgress`): rich draws nothing in a file or a pipe
    until it ends."""
    if not (sys.stderr.isatty() if tty is None else tty):
        return PlainLinesProgress()
    return StepsRichProgressBar(**kwargs) if _RICH_AVAILABLE else StepsTQDMProgressBar(**kwargs)
