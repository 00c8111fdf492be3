"""The training progress bar counts to where training stops (`max_steps`), not the epoch's end."""

from __future__ import annotations

import logging
import re

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from esc.train.progress import (
    PlainLinesProgress,
    StepsRichProgressBar,
    StepsTQDMProgressBar,
    build_progress_bar,
)


class Linear(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Totals(pl.Callback):
    """The bar's total and final count in each epoch."""

    def __init__(self, bar: StepsTQDMProgressBar) -> None:
        self.bar = bar
        self.totals: list[int] = []
        self.counts: list[int] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.totals.append(self.bar.train_progress_bar.total)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.counts.append(self.bar.train_progress_bar.n)


def fit(max_steps: int, accumulate: int = 1, batches: int = 20, ckpt_path=None, save=None) -> Totals:
    bar = StepsTQDMProgressBar()
    totals = Totals(bar)
    trainer = pl.Trainer(
        max_epochs=3,
        max_steps=max_steps,
        accumulate_grad_batches=accumulate,
        callbacks=[bar, totals],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(
        Linear(), DataLoader(TensorDataset(torch.randn(2 * batches, 2)), batch_size=2), ckpt_path=ckpt_path
    )
    if save:
        trainer.save_checkpoint(save)
    return totals


@pytest.mark.parametrize(
    ("max_steps", "accumulate", "totals"),
    [
        (5, 1, [5]),  # Lightning's bar showed 20 (the whole epoch) here
        (25, 1, [20, 5]),  # the last epoch counts only its remaining steps
        (25, 2, [20, 20, 10]),  # each optimizer step is 2 batches
        (-1, 1, [20, 20, 20]),  # no max_steps: whole epochs
    ],
)
def test_the_bar_total_is_the_batches_that_will_train(
    max_steps: int, accumulate: int, totals: list[int]
) -> None:
    seen = fit(max_steps, accumulate)
    assert seen.totals == totals
    assert seen.counts == totals  # and it gets there


def test_a_resumed_epoch_counts_from_the_checkpoint(tmp_path) -> None:
    fit(3, save=tmp_path / "step3.ckpt")
    seen = fit(8, ckpt_path=tmp_path / "step3.ckpt")
    assert seen.totals == [8] and seen.counts == [8]  # batches 4-8 of the epoch, shown as 4/8..8/8


def test_the_bar_is_lightnings_kind_on_a_terminal_and_plain_lines_elsewhere() -> None:
    from pytorch_lightning.utilities.imports import _RICH_AVAILABLE

    kind = StepsRichProgressBar if _RICH_AVAILABLE else StepsTQDMProgressBar
    assert isinstance(build_progress_bar(tty=True), kind)
    assert isinstance(build_progress_bar(tty=False), PlainLinesProgress)


class Logged(Linear):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train/loss", loss)
        return loss


def test_plain_lines_say_the_step_loss_and_time_left(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 37: in a file or a pipe the rich bar printed nothing for 30 minutes, then one line."""
    caplog.set_level(logging.INFO, logger="esc.progress")
    bar = PlainLinesProgress(every_s=3600)  # the first step, then only the end in this short run
    trainer = pl.Trainer(
        max_steps=6, callbacks=[bar], logger=False, enable_checkpointing=False,
        enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(Logged(), DataLoader(TensorDataset(torch.randn(40, 2)), batch_size=2))
    lines = [r.getMessage() for r in caplog.records if r.name == "esc.progress"]
    assert lines[0] == "train: 6 optimizer steps"
    assert re.fullmatch(
        r"train: step 1/6, loss -?\d+\.\d{4}, [\d.]+ s/step, about \d+ s left, \d+ s so far", lines[1]
    )
    assert re.fullmatch(r"train: step 6/6, loss -?\d+\.\d{4}, [\d.]+ s/step, \d+ s so far", lines[-1])
    assert len(lines) == 3
