"""The training progress bar: it counts to where training will actually stop.

Lightning's bars show the whole epoch's batches unless `max_epochs == -1`; with `max_steps` set
(`trainer.max_steps=16` on a 800-batch epoch) they showed 800 and a time for all of them. Here the
total of an epoch is the batches it will really train: up to `max_steps` optimizer steps, each
`accumulate_grad_batches` batches, counted from the batch the epoch starts (or resumes) at.
"""

from __future__ import annotations

import math
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar
from pytorch_lightning.utilities.imports import _RICH_AVAILABLE


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


def build_progress_bar(**kwargs: Any) -> pl.Callback:
    """The bar Lightning would pick (rich when installed, else tqdm), counting to `max_steps`."""
    return StepsRichProgressBar(**kwargs) if _RICH_AVAILABLE else StepsTQDMProgressBar(**kwargs)
